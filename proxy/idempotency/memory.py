"""``MemoryIdempotency``: the idempotency store of one process (embedded mode).

Atomic by construction (no ``await`` between reading and writing a slot);
expired records are dropped when touched and by a sweep every 1,024 writes,
so the map holds at most the records of the last TTL. Stored answers are
bounded in total by ``max_bytes``: past it the oldest records go first (a
retry of an evicted request runs, and is billed, again; pending claims are
never evicted, so nothing in flight is billed twice).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from proxy.idempotency.port import Claim, Record

DEFAULT_MAX_BYTES = 256 * 1024 * 1024


def _size(record: Record) -> int:
    return 0 if record.answer is None else len(record.answer.body)


class MemoryIdempotency:
    def __init__(self, clock: Callable[[], float] = time.monotonic, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.clock = clock
        self.max_bytes = max_bytes
        self._slots: dict[str, tuple[Record, float]] = {}  # slot -> (record, expires at), oldest write first
        self._bytes = 0
        self._writes = 0

    def _get(self, slot: str) -> Record | None:
        found = self._slots.get(slot)
        if found is None:
            return None
        if found[1] <= self.clock():
            self._drop(slot)
            return None
        return found[0]

    def _drop(self, slot: str) -> None:
        record, _ = self._slots.pop(slot)
        self._bytes -= _size(record)

    def _put(self, slot: str, record: Record, ttl_s: float) -> None:
        if slot in self._slots:
            self._drop(slot)  # re-inserted at the end: the order stays oldest write first
        self._slots[slot] = (record, self.clock() + ttl_s)
        self._bytes += _size(record)
        self._writes += 1
        if self._writes % 1024 == 0:
            now = self.clock()
            for s in [s for s, (_, exp) in self._slots.items() if exp <= now]:
                self._drop(s)
        if self._bytes > self.max_bytes:
            for s in [s for s, (r, _) in self._slots.items() if r.answer is not None]:
                if self._bytes <= self.max_bytes:
                    break
                self._drop(s)

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
            self._drop(slot)

    async def close(self) -> None:
        self._slots.clear()
        self._bytes = 0
