"""The ``Buckets`` port: what admission asks of a rate limiter, and what it answers.

Adapters: ``MemoryBuckets`` (embedded mode, one process) and ``RedisBuckets``
(many pods, atomic Lua, local fallback). One contract suite holds both:
``tests/proxy/admission/test_buckets_contract.py``.

Amounts are whole units (requests or tokens). ``reserve`` is all-or-nothing
across its items; ``adjust`` settles afterwards (refund the unused estimate
with a negative delta, charge an underestimate with a positive one; a bucket
may go into debt, repaid by refill). Time is always passed in as ``now_us``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from proxy.limits.bucket import (
    BucketSpec,
    BucketState,
    Decision,
    reset_s,
    retry_after_s,
    units,
)
from proxy.limits.errors import BackendError, InvalidBucket, LimitsError

__all__ = [
    "BackendError",
    "BucketSpec",
    "Buckets",
    "InvalidBucket",
    "LimitsError",
    "Reservation",
]


@dataclass(frozen=True, slots=True)
class Reservation:
    """The answer to ``reserve``.

    ``remaining`` (whole units, floored, negative in debt) and ``reset_s``
    (seconds until full) cover every bucket asked about, after the reservation
    if it was taken. When ``ok`` is false, ``failed_key`` is the first bucket
    short of its amount, ``needed`` that amount and ``retry_after_s`` the whole
    seconds until it fits (>= 1). ``exceeds_capacity``: ``needed`` is more than
    the bucket can ever hold, so waiting will not help (``retry_after_s`` is
    then the time until full).
    """

    ok: bool
    failed_key: str | None = None
    remaining: dict[str, int] = field(default_factory=dict)
    needed: int = 0
    retry_after_s: int = 0
    reset_s: dict[str, float] = field(default_factory=dict)
    exceeds_capacity: bool = False

    @classmethod
    def decided(cls, items: Sequence[tuple[BucketSpec, int]], decision: Decision) -> Reservation:
        """Build the answer from merged ``items`` and the pure ``Decision`` over them."""
        remaining = {spec.key: units(s) for (spec, _), s in zip(items, decision.states)}
        resets = {spec.key: reset_s(s, spec) for (spec, _), s in zip(items, decision.states)}
        if decision.failed is None:
            return cls(ok=True, remaining=remaining, reset_s=resets)
        spec, amount = items[decision.failed]
        state: BucketState = decision.states[decision.failed]
        return cls(
            ok=False,
            failed_key=spec.key,
            remaining=remaining,
            needed=amount,
            retry_after_s=retry_after_s(state, spec, amount),
            reset_s=resets,
            exceeds_capacity=amount > spec.capacity,
        )


@runtime_checkable
class Buckets(Protocol):
    async def reserve(self, items: Sequence[tuple[BucketSpec, int]], now_us: int) -> Reservation:
        """Take every (bucket, amount) or none; amounts >= 0."""
        ...

    async def adjust(self, items: Sequence[tuple[BucketSpec, int]], now_us: int) -> None:
        """Apply deltas: positive charges, negative refunds; levels may go below zero."""
        ...

    async def peek(self, spec: BucketSpec, now_us: int) -> int:
        """The level in whole units at ``now_us`` (floored; negative in debt), without taking."""
        ...

    async def close(self) -> None: ...
