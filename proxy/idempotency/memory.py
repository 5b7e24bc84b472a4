"""``MemoryIdempotency``: the idempotency store of one process (embedded mode).

Atomic by construction (no ``await`` between reading and writing a slot);
expired records are dropped when touched and by a sweep every 1,024 writes,
so the map holds at most the records of the last TTL. Each record is kept as
its serialized bytes (``Record.dumps``): one object per slot, whose size is
what the bound counts (with the slot's key and a fixed overhead per entry), so
``max_bytes`` is close to the store's real footprint. Kept as live objects, a
record of about 1 KB of answer cost about 5 KB of resident memory (its dicts and
strings, and the allocator pages they pinned among each request's short-lived
objects). Past ``max_bytes`` the oldest answered records go first (a retry of an
evicted request runs, and is billed, again; pending claims are never evicted, so
nothing in flight is billed twice).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from proxy.body import kept
from proxy.idempotency.port import Claim, Record, SlotRules

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
ENTRY_OVERHEAD = 160  # a dict entry, its tuple, the expiry float and the bytes object's header


class MemoryIdempotency(SlotRules):
    def __init__(self, clock: Callable[[], float] = time.monotonic, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.clock = clock
        self.max_bytes = max_bytes
        # slot -> (the record's bytes, expires at, answered), oldest write first
        self._slots: dict[str, tuple[bytes, float, bool]] = {}
        self._bytes = 0
        self._writes = 0

    def _get(self, slot: str) -> Record | None:
        found = self._slots.get(slot)
        if found is None:
            return None
        if found[1] <= self.clock():
            self._drop(slot)
            return None
        return Record.loads(found[0])

    def _drop(self, slot: str) -> None:
        data, _, _ = self._slots.pop(slot)
        self._bytes -= len(data) + len(slot) + ENTRY_OVERHEAD

    def _put(self, slot: str, record: Record, ttl_s: float) -> None:
        if slot in self._slots:
            self._drop(slot)  # re-inserted at the end: the order stays oldest write first
        data = kept(record.dumps())
        self._slots[slot] = (data, self.clock() + ttl_s, record.answer is not None)
        self._bytes += len(data) + len(slot) + ENTRY_OVERHEAD
        self._writes += 1
        if self._writes % 1024 == 0:
            now = self.clock()
            for s in [s for s, (_, exp, _) in self._slots.items() if exp <= now]:
                self._drop(s)
        if self._bytes > self.max_bytes:
            self._evict()

    def _evict(self) -> None:
        """Drop the oldest answered records until the store is within ``max_bytes`` (from the front only: the
        scan stops as soon as enough is freed)."""
        over, victims = self._bytes - self.max_bytes, []
        for s, (data, _, answered) in self._slots.items():
            if over <= 0:
                break
            if answered:
                victims.append(s)
                over -= len(data) + len(s) + ENTRY_OVERHEAD
        for s in victims:
            self._drop(s)

    async def claim(self, slot: str, record: Record, ttl_s: float) -> Claim:
        return self._claim(slot, record, ttl_s)

    async def complete(self, slot: str, done: Record, ttl_s: float) -> bool:
        return self._complete(slot, done, ttl_s)

    async def release(self, slot: str, request_id: str) -> None:
        self._release(slot, request_id)

    async def close(self) -> None:
        self._slots.clear()
        self._bytes = 0
