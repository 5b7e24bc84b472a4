"""In-process token buckets: the embedded-mode adapter, and Redis's fallback.

Real code, not a mock: a dict of ``BucketState`` driven by the pure functions
in ``bucket.py``. Each method runs without awaiting, so on one event loop
every call is atomic (not thread-safe: one loop per ``MemoryBuckets``).

``share`` (``farebox serve --workers N``) divides every bucket's capacity:
N processes each holding ``capacity // N`` admit about the limit together.

Idle buckets are swept like Redis keys expire: a state is dropped once it
would read full (plus ``ttl_windows`` of slack), which changes no answer
because a missing bucket *is* a full one.
"""

from __future__ import annotations

from collections.abc import Sequence

from proxy.limits import bucket
from proxy.limits.bucket import BucketSpec, BucketState
from proxy.limits.port import Reservation

SWEEP_EVERY = 1024  # writes between sweeps of idle buckets


class MemoryBuckets:
    def __init__(self, *, ttl_windows: int = 1, share: int = 1) -> None:
        if share < 1:
            raise ValueError(f"share must be >= 1, got {share}")
        self._states: dict[str, tuple[BucketState, int]] = {}  # key -> (state, expires_at_us)
        self._ttl_windows = ttl_windows
        self._writes = 0
        self._share = share
        self._shared: dict[BucketSpec, BucketSpec] = {}  # spec -> its share (share > 1)

    def __len__(self) -> int:
        """Buckets currently stored (idle ones are swept)."""
        return len(self._states)

    def state(self, key: str) -> BucketState | None:
        """The stored state of ``key``, for inspection and tests (``None``: never seen or swept)."""
        entry = self._states.get(key)
        return entry[0] if entry else None

    async def reserve(self, items: Sequence[tuple[BucketSpec, int]], now_us: int) -> Reservation:
        return self.reserve_now(items, now_us)

    def reserve_now(self, items: Sequence[tuple[BucketSpec, int]], now_us: int) -> Reservation:
        """``reserve`` without a coroutine (used by the Redis adapter's fallback)."""
        if self._share > 1:
            items = [(self._part(spec), amount) for spec, amount in items]
        merged = bucket.validated(items, now_us, reserving=True)
        decision = bucket.reserve([self.state(spec.key) for spec, _ in merged], merged, now_us)
        if decision.failed is None:
            for (spec, _), s in zip(merged, decision.states):
                self._store(spec, s, now_us)
        return Reservation.decided(merged, decision)

    async def adjust(self, items: Sequence[tuple[BucketSpec, int]], now_us: int) -> None:
        self.adjust_now(items, now_us)

    def adjust_now(self, items: Sequence[tuple[BucketSpec, int]], now_us: int) -> None:
        if self._share > 1:
            items = [(self._part(spec), amount) for spec, amount in items]
        for spec, delta in bucket.validated(items, now_us, reserving=False):
            self._store(spec, bucket.adjust(self.state(spec.key), spec, delta, now_us), now_us)

    async def peek(self, spec: BucketSpec, now_us: int) -> int:
        return self.peek_now(spec, now_us)

    def peek_now(self, spec: BucketSpec, now_us: int) -> int:
        if self._share > 1:
            spec = self._part(spec)
        bucket.check_time(now_us)
        return bucket.units(bucket.refill(self.state(spec.key), spec, now_us))

    async def close(self) -> None:
        self._states.clear()

    def _part(self, spec: BucketSpec) -> BucketSpec:
        part = self._shared.get(spec)
        if part is None:
            if len(self._shared) > 100_000:  # specs come from config; bound it anyway
                self._shared.clear()
            part = self._shared[spec] = BucketSpec(spec.key, max(1, spec.capacity // self._share), spec.window_s)
        return part

    def _store(self, spec: BucketSpec, state: BucketState, now_us: int) -> None:
        expires = state.t_us + bucket.expires_after_us(state, spec, self._ttl_windows)
        self._states[spec.key] = (state, expires)
        self._writes += 1
        if self._writes % SWEEP_EVERY == 0:
            self.sweep(now_us)

    def sweep(self, now_us: int) -> None:
        """Drop buckets that read full at ``now_us`` (plus slack); runs every SWEEP_EVERY writes."""
        idle = [key for key, (_, expires) in self._states.items() if expires <= now_us]
        for key in idle:
            del self._states[key]

