"""Per-event consumption with the side effects flushed in batches, acknowledged after their flush.

Faust delivers events to an agent cheaply one at a time (``stream.events()``:
about 8,400 records/s on this 2-core machine with no work at all), and three
times slower through ``Stream.take_events`` (its buffer is a per-event
processor coroutine). The worker wants the cheap path *and* batches: a
request's events should update its state in memory and be written to the
table once, and entries of many events should travel in one record.

``Batcher`` runs an agent's stream with manual acknowledgements
(``stream.noack()``): ``handle`` folds each event into the agent's pending
batch (in memory; it may send what must go at once, such as a lease grant),
and ``flush`` produces what the batch sends and writes its table keys. A
flush happens when the batch holds ``max_events``, or ``within_s`` after its
first event (a ticker task: an idle stream still flushes). Events are
acknowledged only after their flush, so a committed offset never covers an
effect that was not written; a crash re-delivers them and the idempotence of
the ledger (high-water offsets, request states) drops what was already done.

One lock serialises ``handle`` and ``flush``: a flush in progress finishes
before the next event is handled, so ``handle`` always sees the batch before
it written (or still pending, never half-written).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("farebox.worker")


class Batcher:
    def __init__(self, stream: Any, handle: Callable[[Any], Awaitable[None]], flush: Callable[[], Awaitable[None]],
                 *, max_events: int, within_s: float) -> None:
        self.stream = stream.noack()
        self.handle = handle
        self.flush = flush
        self.max_events = max_events
        self.within_s = within_s
        self.lock = asyncio.Lock()
        self.pending: list[Any] = []  # events handled, not yet flushed (and so not acknowledged)
        self.first_at = 0.0
        self.flushes = 0
        self.failed: BaseException | None = None  # a flush of the ticker failed: the agent raises it

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        ticker = asyncio.create_task(self._tick())
        try:
            async for event in self.stream.events():
                if self.failed is not None:
                    raise self.failed
                async with self.lock:
                    if not self.pending:
                        self.first_at = loop.time()
                    await self.handle(event)
                    self.pending.append(event)
                    if len(self.pending) >= self.max_events:
                        await self._flush()
        finally:
            ticker.cancel()
            await asyncio.gather(ticker, return_exceptions=True)

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.within_s / 2)
            if self.pending and loop.time() - self.first_at >= self.within_s:
                async with self.lock:
                    if self.pending:
                        try:
                            await self._flush()
                        except Exception as exc:  # the agent raises it at its next event (Faust restarts it)
                            log.exception("a batch flush failed; its events stay unacknowledged")
                            self.failed = exc
                            return

    async def _flush(self) -> None:
        """The caller holds the lock. On failure the events stay unacknowledged (delivered again)."""
        events, self.pending = self.pending, []
        await self.flush()
        self.flushes += 1
        for event in events:
            await self.stream.ack(event)
