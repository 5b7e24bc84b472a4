"""Per-event consumption with the side effects flushed in batches, acknowledged after their flush.

Faust delivers events to an agent cheapest one at a time (``stream.events()``);
``Stream.take_events`` costs a processor coroutine per event. The worker wants
the cheap path *and* batches: a request's events update its state in memory
and are written to the table once, and entries of many events travel in one
record.

``Batcher`` runs an agent's stream with manual acknowledgements
(``stream.noack()``): ``handle`` folds each event into the agent's pending
batch (in memory; it may send what must go at once, such as a lease grant),
and ``flush`` ends the batch. A flush happens when the batch holds
``max_events``, or ``within_s`` after its first event (a ticker task: an idle
stream still flushes).

A flush is pipelined in two steps. ``flush()`` runs under the lock: it takes
the batch, applies it to the in-memory state (the tables' stores), so the next
batch sees it, and starts producing what must reach Kafka first; it returns
the rest as a coroutine (or None), the *completion*: wait for those records,
then produce the table's changelog records and wait for them. Completions run
in a task, strictly one after the other in flush order (a completion starts
when the one before it has finished), while ``handle`` goes on with the next
events; so Kafka's round trips no longer stall the agent. At most
``max_inflight`` completions are outstanding: past that the agent waits for
the oldest. A flush's events are acknowledged only after its completion, so a
committed offset never covers an effect that was not written; a crash
re-delivers them and the idempotence of the ledger (high-water offsets,
request states) drops what was already done. A failed completion leaves its
events (and those of every later flush) unacknowledged. Memory (the agent's
states, the tables' stores) is then ahead of Kafka, and Faust would restart
the agent in the same process without delivering those events again; so
``on_failure`` is called (the worker passes one that ends the process, as a
kill -9 would: it recovers from its changelogs and gets the events again).
Without it the agent raises the error at its next event.

One lock serialises ``handle`` and ``flush()``, so ``handle`` always sees
the state of every batch before it (written or being written, never half
applied).

A rebalance must find nothing half written. Faust's recovery reads a table's
changelog up to its high-water mark into the in-memory store; a flush applied
to the store but whose changelog records are not yet in Kafka would be
overwritten there by the older value, and the next flush would build on it
(its events are acknowledged all the same: entries lost). So when partitions
are revoked the worker calls ``pause``: it flushes what was handled, waits
until every completion is written (their events acknowledged), and handles
nothing more until ``resume`` (after recovery). An event that reaches the
agent while paused, or from before the rebalance (``stale``: Faust's
generation check), is dropped unacknowledged: if its partition is still ours,
Faust delivers it again from the committed offset. Dropped, not held: the
agent must keep draining its stream, because Faust's recovery reads the
changelogs through the same delivery loop, which blocks when an agent's
buffer is full.

Each partition is handled in offset order without holes (``position``: an
event's partition and offset). The ledger's idempotence needs it: a scope
skips entries at or below the high-water offset of their source, so a
splitter that handled offset 120 before 100..119 would have 100..119's
entries skipped. Holes happen around a rebalance: events dropped above (or
skipped by Faust's own stream for the same reasons), then events after them
delivered before Faust seeks back to the committed offset. An event past a
hole is dropped too; the seek delivers the hole and what follows again, in
order. An event at or below the last one handled (a redelivery) is handled
again: the ledger drops what was done. Faust's seek does not always fill the
hole: a record fetched before the rebalance and delivered after Faust's seek
(its generation check reads the generation after the fetch) moves Faust's
read offset past the hole, and Faust then drops the redelivered records below
it as already read. So on a hole the batcher asks the consumer itself to
deliver again from the first missing offset (``rewind``), at once and every
``rewind_every_s`` while the hole stays: checked by the ticker too, because a
rewind can be lost the same way (a record still being delivered from before it
moves the read offset past the hole again), and after the last record past the
hole nothing may arrive to trigger another. A dropped event counts as a hole too,
also in a partition not handled yet (Faust resumes delivery while it recovers
the tables, so a newly assigned partition's first events can arrive while the
agent is paused; the first event accepted after that must not be a later one). A partition with no position yet
starts at its committed offset (``floor``: the consumer's committed offset, known once Faust's seek after a
rebalance has run): a first event past it is past a hole, as if the events from the committed offset had been
dropped; without it an event Faust skipped before the first one accepted would never be handled, and its
partition's commits would stay behind it for good. ``keep`` forgets the positions of
partitions no longer assigned (another worker may move them on). A hole that
no seek fills within ``hole_patience_s`` (records deleted by retention while
the worker was behind, or a bug) is a failure (``on_failure``), whether or not
more records arrive: a restarted worker starts from the committed offset with
no positions.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Coroutine, Hashable
from typing import Any

log = logging.getLogger("farebox.worker")

Completion = Coroutine[Any, Any, None] | None


class Batcher:
    def __init__(self, stream: Any, handle: Callable[[Any], Awaitable[None]], flush: Callable[[], Awaitable[Completion]],
                 *, max_events: int, within_s: float, max_inflight: int = 2,
                 on_failure: Callable[[BaseException], None] | None = None,
                 stale: Callable[[Any], bool] | None = None,
                 position: Callable[[Any], tuple[Hashable, int]] | None = None,
                 rewind: Callable[[Hashable, int], Awaitable[None]] | None = None,
                 floor: Callable[[Hashable], int | None] | None = None,
                 hole_patience_s: float = 30.0, rewind_every_s: float = 1.0) -> None:
        self.stream = stream.noack()
        self.handle = handle
        self.flush = flush
        self.max_events = max_events
        self.within_s = within_s
        self.max_inflight = max_inflight
        self.lock = asyncio.Lock()
        self.pending: list[Any] = []  # events handled, not yet flushed (and so not acknowledged)
        self.inflight: deque[asyncio.Task] = deque()  # completions not yet finished, oldest first
        self.first_at = 0.0
        self.flushes = 0
        self.failed: BaseException | None = None  # a flush failed: the agent raises it at its next event
        self.on_failure = on_failure
        self.stale = stale  # an event delivered before the last rebalance (dropped, not acknowledged)
        self.running = asyncio.Event()  # cleared by ``pause`` (a rebalance), set again by ``resume``
        self.dropped = 0  # events dropped while paused or stale
        self.position = position  # an event's (partition, offset), for the contiguity check
        self.last: dict[Hashable, int] = {}  # partition -> offset of the last event handled
        self.holes = 0  # events dropped because an earlier offset of their partition was not handled
        self.hole_patience_s = hole_patience_s
        self.hole_since: dict[Hashable, float] = {}  # partition -> when its current hole was first seen
        self.rewind = rewind  # (partition, offset): have the consumer deliver again from there
        self.rewind_every_s = rewind_every_s
        self.rewound_at: dict[Hashable, float] = {}  # partition -> when its current hole was last rewound
        self.rewinds = 0
        self.floor = floor  # partition -> its committed offset (None: not known yet)
        self.running.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        ticker = asyncio.create_task(self._tick())
        try:
            async for event in self.stream.events():
                if self.failed is not None:
                    raise self.failed
                if self.position is not None:
                    partition, offset = self.position(event)
                if not self.running.is_set() or (self.stale is not None and self.stale(event)):
                    self.dropped += 1  # delivered again from the committed offset (see the module docstring)
                    if self.position is not None:  # nothing past it is handled before it is
                        self.last[partition] = min(self.last.get(partition, offset - 1), offset - 1)
                    continue
                if self.position is not None:
                    last = self.last.get(partition)
                    if last is None and self.floor is not None:
                        committed = self.floor(partition)
                        if committed is not None and offset > committed:
                            last = self.last[partition] = committed - 1  # what the commit covers is done
                    if last is not None and offset > last + 1:
                        self.holes += 1  # past a hole: delivered again, in order, after Faust's seek
                        since = self.hole_since.setdefault(partition, loop.time())
                        if loop.time() - since > self.hole_patience_s:
                            raise RuntimeError(f"partition {partition}: offset {offset} follows {last} and no "
                                               f"redelivery filled the hole in {self.hole_patience_s:.0f} s")
                        await self._maybe_rewind(partition, last + 1, loop.time())
                        continue
                    self.hole_since.pop(partition, None)
                    self.rewound_at.pop(partition, None)
                async with self.lock:
                    if not self.pending:
                        self.first_at = loop.time()
                    await self.handle(event)
                    self.pending.append(event)
                    if self.position is not None:
                        self.last[partition] = offset
                    if len(self.pending) >= self.max_events:
                        await self._flush()
        except Exception as exc:
            self._fail(exc)
            raise
        finally:
            ticker.cancel()
            await asyncio.gather(ticker, return_exceptions=True)
            if self.inflight:  # let started writes finish (their events are acknowledged if they do)
                await asyncio.wait(list(self.inflight), timeout=10.0)

    async def pause(self) -> None:
        """Flush what was handled and wait until every flush is written; handle nothing until ``resume``.

        For a rebalance (see the module docstring). A failed flush has already reported to ``on_failure``."""
        self.running.clear()
        async with self.lock:
            if self.pending and self.failed is None:
                try:
                    await self._flush()
                except Exception as exc:
                    self._fail(exc)
        if self.inflight:
            await asyncio.wait(list(self.inflight))

    async def _maybe_rewind(self, partition: Hashable, offset: int, now: float) -> None:
        """Ask the consumer to deliver ``partition`` again from ``offset`` (the first one missing): at once, and
        again every ``rewind_every_s`` while the hole stays."""
        if self.rewind is None:
            return
        at = self.rewound_at.get(partition)
        if at is not None and now - at < self.rewind_every_s:
            return
        self.rewound_at[partition] = now
        self.rewinds += 1
        log.info("partition %s: offset %d missing; rewinding the consumer to it", partition, offset)
        await self.rewind(partition, offset)

    def resume(self) -> None:
        self.running.set()

    def keep(self, partitions: Collection[Hashable]) -> None:
        """Forget the positions of partitions not in ``partitions`` (the new assignment)."""
        for partition in [p for p in self.last if p not in partitions]:
            del self.last[partition]
        self.hole_since.clear()
        self.rewound_at.clear()

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.within_s / 2)
            if self.hole_since and self.running.is_set() and self.failed is None:
                try:
                    await self._check_holes(loop.time())
                except Exception as exc:
                    self._fail(exc)
                    return
            if self.pending and self.running.is_set() and loop.time() - self.first_at >= self.within_s:
                async with self.lock:
                    if self.pending:
                        try:
                            await self._flush()
                        except Exception as exc:
                            self._fail(exc)
                            return

    async def _check_holes(self, now: float) -> None:
        """Rewind each partition whose hole stays, every ``rewind_every_s``, also when nothing arrives past it any
        more; raise once one has stayed past ``hole_patience_s``."""
        for partition, since in list(self.hole_since.items()):
            last = self.last.get(partition)
            if last is None or self.hole_since.get(partition) is None:
                continue  # filled or forgotten meanwhile
            if now - since > self.hole_patience_s:
                raise RuntimeError(f"partition {partition}: offset {last + 1} is still missing and no redelivery "
                                   f"filled the hole in {self.hole_patience_s:.0f} s")
            await self._maybe_rewind(partition, last + 1, now)

    async def _flush(self) -> None:
        """The caller holds the lock. On failure the events stay unacknowledged (delivered again)."""
        while self.inflight and self.inflight[0].done():
            self.inflight.popleft()
        while len(self.inflight) >= self.max_inflight:
            await asyncio.wait([self.inflight.popleft()])
        if self.failed is not None:
            raise self.failed
        events, self.pending = self.pending, []
        completion = await self.flush()
        previous = self.inflight[-1] if self.inflight else None
        self.inflight.append(asyncio.create_task(self._complete(previous, completion, events)))
        self.flushes += 1

    async def _complete(self, previous: asyncio.Task | None, completion: Completion, events: list[Any]) -> None:
        try:
            if previous is not None:
                await asyncio.wait([previous])  # strictly in flush order
            if self.failed is not None:  # an earlier flush failed: leave these unacknowledged too
                if completion is not None:
                    completion.close()
                return
            if completion is not None:
                await completion
        except Exception as exc:
            self._fail(exc)
            return
        for event in events:
            await self.stream.ack(event)

    def _fail(self, exc: BaseException) -> None:
        if self.failed is not None and self.failed is not exc:
            return  # the first failure has been reported
        first = self.failed is None
        self.failed = exc
        if first:
            log.exception("a batch flush failed; its events stay unacknowledged", exc_info=exc)
            if self.on_failure is not None:
                self.on_failure(exc)
