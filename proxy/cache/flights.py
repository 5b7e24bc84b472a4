"""``Flights``: identical concurrent misses on one pod make one upstream call.

The first miss of a key leads: it calls upstream and, when done, hands every
follower what it got (the entry's bytes, or None when the answer could not be
cached: an error, a tool call, the leader's caller leaving). A follower with
None goes upstream itself. Per pod only; across pods the first answer stored
in the shared cache serves the rest.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass


@dataclass(slots=True)
class Flight:
    """What one request got from ``Flights.join``: lead (``leader``) or the leader's result."""

    leader: bool
    entry: bytes | None = None
    _done: asyncio.Future[bytes | None] | None = None

    def land(self, entry: bytes | None) -> None:
        """The leader's result for its followers (the first call wins)."""
        if self._done is not None and not self._done.done():
            self._done.set_result(entry)


class Flights:
    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: dict[str, asyncio.Future[bytes | None]] = {}

    def __len__(self) -> int:
        return len(self._open)

    @asynccontextmanager
    async def join(self, key: str) -> AsyncIterator[Flight]:
        """Lead the key's flight, or wait for the one in the air and get its result."""
        running = self._open.get(key)
        if running is not None:
            yield Flight(False, await asyncio.shield(running))
            return
        done: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        self._open[key] = done
        flight = Flight(True, None, done)
        try:
            yield flight
        finally:
            flight.land(None)  # no result handed over (error, cancel): followers go upstream themselves
            if self._open.get(key) is done:
                del self._open[key]
