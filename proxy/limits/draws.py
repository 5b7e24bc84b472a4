"""What one request draws from the buckets, and what it gives back once its usage is known.

Admission reserves each ``Draw``'s ``amount`` (the estimate); settlement adjusts each token or spend bucket by
actual - reserved (``settlement``), and a request refused after reserving gives everything back (``refund``).
Pure: specs and numbers; the ``Buckets`` adapter counts.
"""

from __future__ import annotations

from dataclasses import dataclass

from ledger.usage import TokenUsage
from proxy.limits.bucket import BucketSpec


@dataclass(frozen=True, slots=True)
class Draw:
    """One bucket, how much the request takes from it, and what it counts."""

    spec: BucketSpec
    amount: int
    kind: str  # "requests" | "input" | "output" | "tokens"
    code: str
    who: str  # "This key", "Team platform", "Deployment x"
    quantum: int = 0  # kind "spend" (``spend_rate``): micro-units per bucket unit
    currency: str = ""  # kind "spend": the budget currency, for the message


def items(draws: list[Draw]) -> list[tuple[BucketSpec, int]]:
    return [(d.spec, d.amount) for d in draws]


def settlement(draws: list[Draw], usage: TokenUsage, cost_micro: int = 0) -> list[tuple[BucketSpec, int]]:
    """actual − reserved per token or spend bucket (requests are not refunded)."""
    deltas = []
    for d in draws:
        actual = {"input": usage.prompt_tokens, "output": usage.completion_tokens,
                  "tokens": usage.prompt_tokens + usage.completion_tokens,
                  "spend": -(-max(cost_micro, 0) // d.quantum) if d.quantum else None}.get(d.kind)
        if actual is not None and actual != d.amount:
            deltas.append((d.spec, actual - d.amount))
    return deltas


def refund(draws: list[Draw]) -> list[tuple[BucketSpec, int]]:
    return [(d.spec, -d.amount) for d in draws if d.amount]


