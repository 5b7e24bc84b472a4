"""``Flights``: identical concurrent misses on one pod make one upstream call.

The first miss of a key leads (``join`` returns at once with ``leader``): it
calls upstream and must then ``land`` its flight, with the entry's bytes or
None when the answer could not be cached (an error, a tool call, its caller
leaving). Followers' ``join`` waits for that and returns the leader's result;
a follower given None goes upstream itself. Per pod only; across pods the
first answer stored in the shared cache serves the rest.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass


@dataclass(slots=True)
class Flight:
    """What ``Flights.join`` gave one request: lead it (``leader``), or the leader's result (``entry``)."""

    key: str
    leader: bool
    entry: bytes | None = None
    done: asyncio.Future[bytes | None] | None = None  # the leader's: what followers wait on


class Flights:
    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: dict[str, asyncio.Future[bytes | None]] = {}

    def __len__(self) -> int:
        return len(self._open)

    async def join(self, key: str) -> Flight:
        """Lead the key's flight, or wait for the one in the air and get its result."""
        running = self._open.get(key)
        if running is not None:
            return Flight(key, False, await asyncio.shield(running))  # a follower leaving never cancels it
        done: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        self._open[key] = done
        return Flight(key, True, None, done)

    def land(self, flight: Flight, entry: bytes | None) -> None:
        """The leader's result for its followers; the first call wins, a follower's call does nothing."""
        if flight.done is None:
            return
        if not flight.done.done():
            flight.done.set_result(entry)
        if self._open.get(flight.key) is flight.done:
            del self._open[flight.key]
