"""What the worker does when partitions move: quiesce before, re-read its state from the tables after.

Invariants:

* before Faust's recovery re-reads the changelogs into the tables' stores
  (``quiesce``, on revocation): every agent has flushed what it handled, every
  flush is written, its events acknowledged and committed; so nothing in
  memory is newer than Kafka, and the next owner of a revoked partition
  starts after what this worker wrote (``streams.batching``);
* after the rebalance (``forget``): the in-memory state is rebuilt from the
  recovered tables, for this worker's partitions only (a table's memory store
  keeps keys of partitions that moved away; Faust forgets only those it
  recovered itself), and the agents resume.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ledger.retention import index_states
from streams.table_writes import key_partition
from streams.worker.state import Worker, WorkerState

log = logging.getLogger("farebox.worker")


async def quiesce(w: Worker, state: WorkerState) -> None:
    await asyncio.gather(*(b.pause() for b in state.batchers.values()))
    if w.app.consumer.assignment():
        await w.app.consumer.commit()


def forget(w: Worker, state: WorkerState) -> None:
    cfg, consumer = w.cfg, w.app.consumer
    assigned = consumer.assignment()
    state.live.clear()
    owned = {str(tp.partition) for tp in assigned if tp.topic == cfg.requests_topic}
    indexes, opened = index_states(w.request_states.items(), cfg.request_retention_s, owned)
    state.closed.clear()
    state.closed.update(indexes)
    state.open_requests.clear()
    state.open_requests.update(opened)
    scope_parts = {tp.partition for tp in assigned if tp.topic == cfg.scope_topic}
    count = consumer.topic_partitions(cfg.scope_topic) or cfg.partitions
    state.dirty.update(scope for scope, _ in w.scope_ledger.items() if key_partition(scope, count) in scope_parts)
    for b in state.batchers.values():
        b.keep(assigned)
        if b.dropped or b.holes:
            log.info("rebalance: %d events dropped while paused or stale, %d past a hole (delivered again; "
                     "%d rewinds)", b.dropped, b.holes, b.rewinds)
        b.resume()


def register(w: Worker, state: WorkerState) -> None:
    @w.app.on_partitions_revoked.connect  # type: ignore[misc]
    async def on_revoked(sender: Any, revoked: Any, **kwargs: Any) -> None:
        await quiesce(w, state)

    @w.app.on_rebalance_complete.connect  # type: ignore[misc]
    async def on_rebalanced(sender: Any, **kwargs: Any) -> None:
        forget(w, state)
