"""In-memory EventLog: a real adapter (not a mock) for tests of other packages.

Events are stored encoded and decoded on read, exactly like the durable
adapters, so a test using it catches events that would not survive the wire.
A ``MemoryLogStore`` plays the part of the file: pass the same store to a new
log to "reopen" it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from ledger.codec import decode, encode
from ledger.events import Event
from streams.eventlog import EventLogClosed


@dataclass
class MemoryLogStore:
    payloads: list[bytes] = field(default_factory=list)  # offset n is payloads[n - 1]
    offsets: dict[str, int] = field(default_factory=dict)  # event id -> offset


class MemoryEventLog:
    """Durable the moment ``append`` returns (for the life of the store)."""

    def __init__(self, store: MemoryLogStore | None = None) -> None:
        self.store = store if store is not None else MemoryLogStore()
        self._closed = False

    def append(self, event: Event) -> asyncio.Future[int]:
        if self._closed:
            raise EventLogClosed("the event log is closed")
        payload = encode(event)
        offset = self.store.offsets.get(event.id)
        if offset is None:
            self.store.payloads.append(payload)
            offset = self.store.offsets[event.id] = len(self.store.payloads)
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        future.set_result(offset)
        return future

    async def flush(self) -> None:
        return None

    async def read(self, after: int = 0, limit: int = 1000) -> list[tuple[int, Event]]:
        if self._closed:
            raise EventLogClosed("the event log is closed")
        start = max(after, 0)
        chunk = self.store.payloads[start : start + max(limit, 0)]
        return [(start + i + 1, decode(payload)) for i, payload in enumerate(chunk)]

    async def close(self) -> None:
        self._closed = True

    @property
    def last_offset(self) -> int:
        return len(self.store.payloads)
