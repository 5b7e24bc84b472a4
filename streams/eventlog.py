"""The EventLog port: how events become durable and are read back in order.

Contract (held by ``tests/streams/test_eventlog_contract.py`` for every adapter):

* ``append(event)`` returns at once with a future and never blocks or awaits;
  the future resolves with the event's offset once the event is durable. The
  request path does not await it; ``flush`` and ``close`` are the barriers.
* Offsets are positive integers increasing in append order (first is 1).
* Appending an event whose id is already in the log changes nothing and
  resolves with the existing offset (dedupe by event id), so producers may
  retry and consumers may be idempotent.
* ``flush()`` returns when everything appended before it is durable.
* ``read(after, limit)`` returns durable events with offset > ``after`` in
  offset order, at most ``limit`` of them.
* ``close()`` flushes, then refuses further appends and reads (``EventLogClosed``);
  nothing accepted is lost. Closing twice is a no-op.
* ``last_offset`` is the offset of the last durable event (0 when empty).

Errors (``StreamsError`` base)::

    StreamsError
      EventLogClosed     append or read after close (or append to a read-only log)
      EventLogFailed     the log could not persist; it stops accepting (fail-stop)
"""

from __future__ import annotations

import asyncio
from typing import Protocol, runtime_checkable

from ledger.events import Event


class StreamsError(Exception):
    """Base of every streams error."""


class EventLogClosed(StreamsError):
    pass


class EventLogFailed(StreamsError):
    pass


@runtime_checkable
class EventLog(Protocol):
    def append(self, event: Event) -> asyncio.Future[int]:
        """Accept an event; the future resolves with its offset when durable."""
        ...

    async def flush(self) -> None:
        """Return once everything appended so far is durable."""
        ...

    async def read(self, after: int = 0, limit: int = 1000) -> list[tuple[int, Event]]:
        """Durable events with offset > ``after``, in append order."""
        ...

    async def close(self) -> None:
        """Flush and stop accepting appends; idempotent."""
        ...

    @property
    def last_offset(self) -> int:
        """Offset of the last durable event, 0 for an empty log."""
        ...
