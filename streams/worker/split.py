"""The splitter agent (``fb.requests``, concurrency 1): request events -> per-scope entries, rollup rows, states.

Each request event goes through ``ledger.splitting.split`` with the request's
current state (the batch's pending one first, else the ``requests`` table's).
A flush sends one ``scope.entries`` record per scope to ``fb.scope-entries``
(keyed by scope, so each scope has one writer and its entries keep their
source order) and one rollup record per key to ``fb.rollups``, then writes
each request's newest state to the ``requests`` table once, to the changelog
partition of the event that produced it. Sends come before the table writes
(``streams.worker.delivery.complete``): a crash between them re-sends entries
with the same source offsets, which the scope skips.

Retention (``ledger.retention``): per ``fb.requests`` partition a clock and
an index of closed requests; an admission older than the horizon is refused
as stale (logged, not counted), and each flush forgets a few closed states
past the horizon, each delete to its own partition's changelog.

``handled_to_end`` tells the sweeper where holds may expire: only in
partitions the splitter has handled up to the consumer's last high-water mark
(behind it, a request's settlement may still be unread).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson

from ledger.codec import decode
from ledger.events import RequestEvent
from ledger.leases import entries_batch
from ledger.retention import ClosedRequests, admitted_epoch, forget_due
from ledger.rollups import rows_record
from ledger.splitting import SplitBatch, split
from streams import dead_letters
from streams.batching import Completion
from streams.table_writes import PartitionView, TableWrites, send_keyed
from streams.worker.delivery import batcher, complete, dead_letter
from streams.worker.state import Worker, WorkerState

log = logging.getLogger("farebox.worker")


class Splitter:
    """The splitter's pending batch and its two steps (``handle`` one event, ``flush`` the batch)."""

    def __init__(self, w: Worker, state: WorkerState) -> None:
        self.w = w
        self.state = state
        self.batch = SplitBatch()

    async def handle(self, event: Any) -> None:
        w, state = self.w, self.state
        state.stats.requests += 1
        try:
            ev = decode(event.value)
        except dead_letters.READ_ERRORS as exc:
            await dead_letter(w, state, event, exc)
            return
        if not isinstance(ev, RequestEvent):
            return  # nothing else is routed to fb.requests
        rid, partition = ev.request_id, event.message.partition
        source = str(partition)
        index = state.closed.get(source)
        if index is None:
            index = state.closed[source] = ClosedRequests(w.cfg.request_retention_s)
        index.observe(ev.time.timestamp(), time.time())
        pending = self.batch.states.get(rid)
        current = pending[1] if pending is not None else w.request_states.get(rid)
        result = split(ev, current, w.cfg.tz, source, event.message.offset, index.horizon)
        self.batch.add(rid, result, partition, event.message.offset)
        if result.state is not None:
            if result.state["s"] == "open":
                state.open_requests[rid] = result.state
            else:
                state.open_requests.pop(rid, None)
                index.closed(rid, admitted_epoch(result.state))
        elif result.stale:
            state.stats.stale += 1
            log.warning("admission of %s dated %s is older than the retention horizon of fb.requests "
                        "partition %s: refused as stale (not counted)", rid, ev.time.isoformat(), source)

    async def flush(self) -> Completion:
        """Under the lock: the batch's entries and rollup rows to Kafka, its states to the table's store; the
        completion waits for Kafka's acks, then produces the states' changelog records and waits for them."""
        w, state = self.w, self.state
        batch, self.batch = self.batch, SplitBatch()
        sent = await send_keyed(w.app, w.cfg.scope_topic, [(scope.encode(), orjson.dumps(entries_batch(scope, rows)))
                                                           for scope, rows in batch.entries.items()])
        sent += await send_keyed(w.app, w.cfg.rollups_topic, [(key.encode(), orjson.dumps(rows_record(source, rows)))
                                                              for key, (source, rows) in batch.rows.items()])
        writes = TableWrites(w.app)
        for rid, (partition, value) in batch.states.items():
            writes.put(w.request_states, partition, rid, value)
        for source, index in state.closed.items():  # deletes go to their own partition's changelog
            if index.has_due():
                view = PartitionView(writes, w.request_states, int(source))
                state.stats.forgotten += forget_due(view, index, source, w.cfg.prune_batch)
        return complete(sent, writes)


def handled_to_end(w: Worker, state: WorkerState) -> set[str]:
    """The fb.requests partitions the splitter has handled up to the high-water mark of the consumer's last
    fetch: the sweeper expires holds only there."""
    splitter = state.batchers.get("split")
    handled = splitter.last if splitter is not None else {}
    ready = set()
    for tp in w.app.consumer.assignment():
        if tp.topic == w.cfg.requests_topic:
            high = w.app.consumer.highwater(tp)
            if high is not None and handled.get(tp, -1) + 1 >= high:
                ready.add(str(tp.partition))
    return ready


def register(w: Worker, state: WorkerState) -> None:
    splitter = Splitter(w, state)

    @w.app.agent(w.requests, concurrency=1)
    async def split_requests(stream):  # type: ignore[no-untyped-def]
        await batcher(w, state, "split", stream, splitter.handle, splitter.flush, w.cfg.split_within_s).run()
