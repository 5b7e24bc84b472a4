"""Which buckets a request draws on, and what a refusal says.

Per request: the key's requests, input tokens and output tokens per minute,
and the team's tokens per minute; per attempt, the chosen deployment's mirror
of the provider's limits (at ``mirror_pct``). Admission reserves the
estimate; settlement adjusts by actual − reserved (buckets may go briefly
negative). Pure: builds specs and messages; the ``Buckets`` adapter does the
counting.

A deployment's ``concurrent_sequences`` is a slot per attempt
(``proxy.limits.draws.sequence_spec``), held in full, not at ``mirror_pct``:
the number is the fleet's own.
"""

from __future__ import annotations

import math

from pricing.money import to_decimal
from proxy.errors import RateLimited
from proxy.limits import Reservation
from proxy.limits.bucket import bucket_spec
from proxy.limits.draws import Draw, mirror_specs, sequence_spec
from proxy.snapshot import Deployment, KeyRecord, Snapshot


def request_draws(snap: Snapshot, key: KeyRecord, est_input: int, max_output: int) -> list[Draw]:
    limits = key.limits.over(snap.rate_limits.key_default)
    kid = key.key_id
    draws = []
    if limits.rpm:
        draws.append(Draw(bucket_spec(f"key:{kid}:rpm", limits.rpm), 1, "requests", "key_requests_per_minute", "This key"))
    if limits.input_tpm:
        draws.append(Draw(bucket_spec(f"key:{kid}:itpm", limits.input_tpm), est_input, "input", "key_tokens_per_minute", "This key"))
    if limits.output_tpm:
        draws.append(Draw(bucket_spec(f"key:{kid}:otpm", limits.output_tpm), max_output, "output", "key_tokens_per_minute", "This key"))
    team_tpm = snap.rate_limits.team_tpm.get(key.team)
    if team_tpm:
        draws.append(Draw(bucket_spec(f"team:{key.team}:tpm", team_tpm), est_input + max_output, "tokens",
                          "team_tokens_per_minute", f"Team {key.team}"))
    return draws


def deployment_draws(snap: Snapshot, dep: Deployment, est_input: int, max_output: int) -> list[Draw]:
    pct = snap.rate_limits.mirror_pct
    draws = []
    who = f"Deployment {dep.id}"
    seqs = sequence_spec(dep)
    if seqs is not None:
        draws.append(Draw(seqs, 1, "sequences", "provider_capacity", who))
    amounts = {"rpm": (1, "requests"), "itpm": (est_input, "input"), "otpm": (max_output, "output")}
    for name, spec, _ in mirror_specs(dep, pct):
        amount, kind = amounts[name]
        draws.append(Draw(spec, amount, kind, "provider_capacity", who))
    return draws


SDK_MAX_RETRY_AFTER_S = 60

_UNITS = {"requests": "requests", "input": "input tokens", "output": "output tokens", "tokens": "tokens"}


def refusal(draws: list[Draw], res: Reservation, est_input: int, max_output: int) -> RateLimited:
    draw = next(d for d in draws if d.spec.key == res.failed_key)
    left = max(res.remaining.get(draw.spec.key, 0), 0)
    if draw.kind == "spend":
        return _spend_refusal(draws, draw, left, res)
    if draw.kind == "sequences":  # a slot frees when an attempt ends: soon, not at the bucket's refill
        return RateLimited(f"{draw.who} is serving its limit of {draw.spec.capacity:,} concurrent sequences.",
                           code=draw.code, headers={**limit_headers(draws, res), "Retry-After": "1"})
    unit = _UNITS[draw.kind]
    needs = f"{res.needed:,}"
    if draw.kind == "tokens":
        needs += f" ({est_input:,} input + {max_output:,} max output)"
    elif draw.kind == "output":
        needs += " (max output)"
    message = f"{draw.who} has {left:,} {unit}/min left; the request needs {needs}."
    headers = limit_headers(draws, res)
    if res.exceeds_capacity:
        message += f" That is more than the limit of {draw.spec.capacity:,} per minute: lower the request, waiting will not help."
    else:
        headers["Retry-After"] = str(res.retry_after_s)
    return RateLimited(message, code=draw.code, headers=headers)


def _spend_refusal(draws: list[Draw], draw: Draw, left: int, res: Reservation) -> RateLimited:
    """The fast spend bucket is short: money per hour, in the budget currency."""
    q, cur = draw.quantum, draw.currency
    message = (f"{draw.who} has {to_decimal(left * q)} {cur} left of its spend rate of "
               f"{to_decimal(draw.spec.capacity * q)} {cur} per hour; the request holds {to_decimal(draw.amount * q)} {cur}.")
    headers = limit_headers(draws, res)
    if res.exceeds_capacity:
        message += " That is more than the hourly limit: lower max_completion_tokens, waiting will not help."
        headers["x-should-retry"] = "false"
    else:
        headers["Retry-After"] = str(res.retry_after_s)
        # The official SDKs honour Retry-After only up to 60 s; beyond, their own retries come too soon.
        headers["x-should-retry"] = "true" if res.retry_after_s <= SDK_MAX_RETRY_AFTER_S else "false"
    return RateLimited(message, code=draw.code, headers=headers)


def limit_headers(draws: list[Draw], res: Reservation) -> dict[str, str]:
    """OpenAI's x-ratelimit-* names for the key's request and input-token buckets."""
    headers: dict[str, str] = {}
    for d in draws:
        if not d.spec.key.startswith("key:"):
            continue
        name = {"requests": "requests", "input": "tokens", "output": "output-tokens"}.get(d.kind)
        if name is None:
            continue
        headers[f"x-ratelimit-limit-{name}"] = str(d.spec.capacity)
        headers[f"x-ratelimit-remaining-{name}"] = str(max(res.remaining.get(d.spec.key, 0), 0))
        headers[f"x-ratelimit-reset-{name}"] = _duration(res.reset_s.get(d.spec.key, 0.0))
    return headers


def _duration(seconds: float) -> str:
    """OpenAI's style: 20ms, 4s, 1m30s."""
    if seconds < 1:
        return f"{math.ceil(seconds * 1000)}ms"
    s = math.ceil(seconds)
    return f"{s // 60}m{s % 60}s" if s >= 60 else f"{s}s"
