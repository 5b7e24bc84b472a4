"""``MemoryIdempotency``: the idempotency store of one process (embedded mode).

Atomic by construction (no ``await`` between reading and writing a slot);
expired records are dropped when touched and by a sweep every 1,024 writes,
so the map holds at most the records of the last TTL.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from proxy.idempotency.port import Claim, Record


class MemoryIdempotency:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._slots: dict[str, tuple[Record, float]] = {}  # slot -> (record, expires at)
        self._writes = 0

    def _get(self, slot: str) -> Record | None:
        found = self._slots.get(slot)
        if found is None:
            return None
        if found[1] <= self.clock():
            del self._slots[slot]
            return None
        return found[0]

    def _put(self, slot: str, record: Record, ttl_s: float) -> None:
        self._slots[slot] = (record, self.clock() + ttl_s)
        self._writes += 1
        if self._writes % 1024 == 0:
            now = self.clock()
            for s in [s for s, (_, exp) in self._slots.items() if exp <= now]:
                del self._slots[s]

    async def claim(self, slot: str, record: Record, ttl_s: float) -> Claim:
        found = self._get(slot)
        if found is not None:
            return Claim(False, found)
        self._put(slot, record, ttl_s)
        return Claim(True, record)

    async def complete(self, slot: str, done: Record, ttl_s: float) -> bool:
        found = self._get(slot)
        if found is None or found.request_id != done.request_id or found.state != "pending":
            return False
        self._put(slot, done, ttl_s)
        return True

    async def release(self, slot: str, request_id: str) -> None:
        found = self._get(slot)
        if found is not None and found.request_id == request_id:
            del self._slots[slot]

    async def close(self) -> None:
        self._slots.clear()
