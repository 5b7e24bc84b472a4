"""What one request draws from the buckets, and what it gives back once its usage is known.

Admission reserves each ``Draw``'s ``amount`` (the estimate); settlement adjusts each token or spend bucket by
actual - reserved (``settlement``), and a request refused after reserving gives everything back (``refund``).
Pure: specs and numbers; the ``Buckets`` adapter counts.

A deployment's ``concurrent_sequences`` (a self-hosted fleet's max-num-seqs) is a slot per attempt, taken when
the attempt is cleared and given back when it is metered (every attempt is, once). It is a bucket of that
capacity refilling over ``SEQUENCE_WINDOW_S`` (``sequence_spec``), so the same adapters count it in every mode,
and a slot a dead pod never gave back returns by itself (one every ``SEQUENCE_WINDOW_S / capacity`` seconds)
instead of shrinking the fleet for ever. The price of that refill: while attempts last ``d`` seconds on average,
up to ``d / SEQUENCE_WINDOW_S`` of the limit more may run at once (under 7% at one-minute streams).
"""

from __future__ import annotations

from dataclasses import dataclass

from ledger.usage import TokenUsage
from proxy.limits.bucket import BucketSpec, bucket_spec
from proxy.snapshot import Deployment

SEQUENCE_WINDOW_S = 900


@dataclass(frozen=True, slots=True)
class Draw:
    """One bucket, how much the request takes from it, and what it counts."""

    spec: BucketSpec
    amount: int
    kind: str  # "requests" | "input" | "output" | "tokens" | "spend" | "sequences" (held while the attempt runs)
    code: str
    who: str  # "This key", "Team platform", "Deployment x"
    quantum: int = 0  # kind "spend" (``spend_rate``): micro-units per bucket unit
    currency: str = ""  # kind "spend": the budget currency, for the message


MIRRORED = (("rpm", "rpm"), ("itpm", "input_tpm"), ("otpm", "output_tpm"))  # bucket name, ProviderLimits field


def mirror_specs(dep: Deployment, pct: int) -> list[tuple[str, BucketSpec, int]]:
    """``dep``'s provider-limit mirrors: (name, bucket at ``pct`` of the limit, the provider's limit per minute)
    for each limit it has."""
    out = []
    for name, attr in MIRRORED:
        per_min = getattr(dep.limits, attr)
        if per_min:
            out.append((name, bucket_spec(f"dep:{dep.id}:{name}", max(per_min * pct // 100, 1)), per_min))
    return out


def sequence_spec(dep: Deployment) -> BucketSpec | None:
    """The bucket of ``dep``'s concurrent sequences (None: not limited)."""
    seqs = dep.limits.concurrent_sequences
    return bucket_spec(f"dep:{dep.id}:seq", seqs, SEQUENCE_WINDOW_S) if seqs else None


def items(draws: list[Draw]) -> list[tuple[BucketSpec, int]]:
    return [(d.spec, d.amount) for d in draws]


def settlement(draws: list[Draw], usage: TokenUsage, cost_micro: int = 0) -> list[tuple[BucketSpec, int]]:
    """actual − reserved per token or spend bucket (requests are not refunded); a sequence slot is given back."""
    deltas = []
    for d in draws:
        actual = {"input": usage.prompt_tokens, "output": usage.completion_tokens,
                  "tokens": usage.prompt_tokens + usage.completion_tokens, "sequences": 0,
                  "spend": -(-max(cost_micro, 0) // d.quantum) if d.quantum else None}.get(d.kind)
        if actual is not None and actual != d.amount:
            deltas.append((d.spec, actual - d.amount))
    return deltas


def refund(draws: list[Draw]) -> list[tuple[BucketSpec, int]]:
    return [(d.spec, -d.amount) for d in draws if d.amount]


