"""Token-bucket arithmetic, pure and exact, shared by every ``Buckets`` adapter.

No clock, no I/O: callers pass ``now_us``. The Redis Lua scripts
(``redis_buckets.py``) are a line-by-line transcription of ``refill`` and the
all-or-nothing rule in ``reserve``; the contract suite checks they agree.

Units and the refill formula
----------------------------
A bucket of capacity ``C`` per window ``W`` seconds holds a *level* in
milli-units (``C * 1000`` when full) and refills continuously at ``C`` units
per ``W`` seconds, i.e. ``C / (W * 1000)`` milli-units per microsecond. To stay
exact in integers, the fraction that did not yet make a whole milli-unit is
carried in ``rem`` (a numerator over ``D = W * 1000``)::

    q, rem' = divmod(elapsed_us * C + rem, W * 1000)
    level'  = min(C * 1000, level + q)           (full => rem' = 0)

So refilling in many small steps gives exactly what one big step gives; no
refill is ever lost to rounding. Elapsed time is first split into whole
windows (each adds exactly ``C * 1000``; once the deficit is covered the
bucket is simply full), so the largest intermediate value is
``W * 1e6 * C + W * 1000``, which ``BucketSpec`` keeps below 2**53 so that Lua's
doubles compute the same integers (e.g. ``W = 60`` allows ``C`` up to ~150M).
Time never runs backwards for a bucket: ``t' = max(t, now_us)``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from proxy.limits.errors import InvalidBucket

MILLI = 1000
US_PER_S = 1_000_000
EXACT_LIMIT = 2**53  # largest integer range where Lua doubles are exact


def max_capacity(window_s: int = 60) -> int:
    """The largest per-window capacity a bucket can have (config validation uses it)."""
    return (EXACT_LIMIT - window_s * MILLI - 1) // (window_s * US_PER_S)


@dataclass(frozen=True, slots=True)
class BucketSpec:
    """A named bucket: ``capacity`` units per ``window_s`` seconds (refill continuous)."""

    key: str
    capacity: int
    window_s: int = 60

    def __post_init__(self) -> None:
        if not self.key:
            raise InvalidBucket("a bucket needs a non-empty key")
        if self.capacity < 1 or self.window_s < 1:
            raise InvalidBucket(
                f"bucket {self.key!r}: capacity and window_s must be >= 1 "
                f"(got {self.capacity}, {self.window_s})"
            )
        if self.capacity * self.window_s * US_PER_S + self.window_s * MILLI >= EXACT_LIMIT:
            raise InvalidBucket(
                f"bucket {self.key!r}: capacity x window_s = {self.capacity * self.window_s} "
                f"is above {EXACT_LIMIT // US_PER_S} (integer refill must stay exact in Lua)"
            )

    @property
    def full(self) -> int:
        """The full level in milli-units."""
        return self.capacity * MILLI


@functools.lru_cache(maxsize=8192)
def bucket_spec(key: str, capacity: int, window_s: int = 60) -> BucketSpec:
    """``BucketSpec(key, capacity, window_s)``, built and checked once per distinct bucket: the request path names
    the same few buckets (its key's, its team's, its deployments') on every request. A spec that fails its
    check is refused every time (an exception is never cached)."""
    return BucketSpec(key, capacity, window_s)


@dataclass(frozen=True, slots=True)
class BucketState:
    """What is stored per bucket: level (milli-units, may be negative), refill remainder, last time."""

    level: int
    rem: int
    t_us: int


def fresh(spec: BucketSpec, now_us: int) -> BucketState:
    """A bucket never seen (or expired) is full."""
    return BucketState(spec.full, 0, now_us)


def refill(state: BucketState | None, spec: BucketSpec, now_us: int) -> BucketState:
    """The state at ``now_us``: continuous refill, capped at full, exact (see module doc)."""
    if state is None:
        return fresh(spec, now_us)
    t = max(state.t_us, now_us)
    cap = spec.full
    level = state.level
    if level >= cap:
        return BucketState(cap, 0, t)
    windows, elapsed = divmod(t - state.t_us, spec.window_s * US_PER_S)
    if windows:
        deficit_windows = -(-(cap - level) // cap)  # ceil; >= 1 since level < cap
        if windows >= deficit_windows:
            return BucketState(cap, 0, t)
        level += windows * cap
    q, rem = divmod(elapsed * spec.capacity + state.rem, spec.window_s * MILLI)
    level += q
    if level >= cap:
        return BucketState(cap, 0, t)
    return BucketState(level, rem, t)


def us_until(state: BucketState, spec: BucketSpec, level: int) -> int:
    """Microseconds (rounded up) until ``state`` refills to ``level`` milli-units; 0 if there."""
    deficit = level - state.level
    if deficit <= 0:
        return 0
    numerator = deficit * spec.window_s * MILLI - state.rem
    return -(-numerator // spec.capacity)


def reset_s(state: BucketState, spec: BucketSpec) -> float:
    """Seconds until full, for ``x-ratelimit-reset-*``."""
    return us_until(state, spec, spec.full) / US_PER_S


def retry_after_s(state: BucketState, spec: BucketSpec, amount: int) -> int:
    """Whole seconds (ceil, at least 1) until ``amount`` units fit; until full if they never fit."""
    target = min(amount, spec.capacity) * MILLI
    us = us_until(state, spec, target)
    return max(1, -(-us // US_PER_S))


def units(state: BucketState) -> int:
    """The level in whole units, floored (a bucket in debt reads negative)."""
    return state.level // MILLI


def merge(items: Iterable[tuple[BucketSpec, int]]) -> list[tuple[BucketSpec, int]]:
    """Sum amounts for a key named twice (first position kept); a key with two specs is an error."""
    merged: dict[str, tuple[BucketSpec, int]] = {}
    for spec, amount in items:
        if not isinstance(amount, int) or isinstance(amount, bool):
            raise InvalidBucket(f"bucket {spec.key!r}: amount must be an int, got {amount!r}")
        seen = merged.get(spec.key)
        if seen is None:
            merged[spec.key] = (spec, amount)
        elif seen[0] != spec:
            raise InvalidBucket(f"bucket {spec.key!r} given with two specs: {seen[0]} and {spec}")
        else:
            merged[spec.key] = (spec, seen[1] + amount)
    for spec, amount in merged.values():
        if abs(amount) * MILLI >= EXACT_LIMIT:
            raise InvalidBucket(f"bucket {spec.key!r}: amount {amount} is out of range")
    return list(merged.values())


def validated(
    items: Iterable[tuple[BucketSpec, int]], now_us: int, *, reserving: bool
) -> list[tuple[BucketSpec, int]]:
    """Check the time and amounts, and merge a key named twice (see ``merge``)."""
    check_time(now_us)
    merged = merge(items)
    if reserving:
        for spec, amount in merged:
            if amount < 0:
                raise InvalidBucket(f"bucket {spec.key!r}: cannot reserve a negative amount ({amount})")
    return merged


def check_time(now_us: int) -> None:
    if not isinstance(now_us, int) or not 0 <= now_us < EXACT_LIMIT:
        raise InvalidBucket(f"now_us must be an int in [0, 2**53), got {now_us!r}")


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of ``reserve`` over refilled states: new states, and the first failure if any."""

    states: tuple[BucketState, ...]
    failed: int | None  # index into the items of the first bucket short of its amount


def reserve(
    states: Sequence[BucketState | None], items: Sequence[tuple[BucketSpec, int]], now_us: int
) -> Decision:
    """All-or-nothing: take every amount, or (if any bucket's level < amount) take nothing."""
    refilled = [refill(s, spec, now_us) for s, (spec, _) in zip(states, items)]
    for i, (state, (_, amount)) in enumerate(zip(refilled, items)):
        if state.level < amount * MILLI:
            return Decision(tuple(refilled), i)
    taken = tuple(
        BucketState(s.level - amount * MILLI, s.rem, s.t_us) for s, (_, amount) in zip(refilled, items)
    )
    return Decision(taken, None)


def adjust(state: BucketState | None, spec: BucketSpec, delta: int, now_us: int) -> BucketState:
    """Charge (delta > 0) or refund (delta < 0) after refill; debt allowed, never above full."""
    s = refill(state, spec, now_us)
    level = s.level - delta * MILLI
    if level >= spec.full:
        return BucketState(spec.full, 0, s.t_us)
    return BucketState(level, s.rem, s.t_us)


def expires_after_us(state: BucketState, spec: BucketSpec, slack_windows: int) -> int:
    """How long a stored state matters: until full, plus slack. After that it equals ``fresh``."""
    return us_until(state, spec, spec.full) + slack_windows * spec.window_s * US_PER_S
