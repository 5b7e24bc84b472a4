"""The scope ledger agent (``fb.scope-entries``, concurrency 1): each scope's entries and lease traffic folded.

A record is a batch of one scope's entries (``scope.entries``), one entry, or
a lease or budget event; each item goes through
``streams.worker.leases.apply_item``. Concurrency stays 1: with more, Faust
can commit past a record not yet processed (faust-streaming issue 606).

A flush writes each scope it changed once, as of the flush, to the
``scope_ledger`` table in the changelog partition of the record that changed
it (the scope's own partition: entries are keyed by scope), after Kafka has
every grant and notice of the batch; then the scopes are marked for the Redis
projection (``streams.worker.projections``). The window is short
(``scope_within_s``): grants go out at once, only the table write waits.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from ledger.codec import from_dict
from ledger.leases import ENTRIES_TYPE, ENTRY_TYPE, ScopeEntry, entries_of
from streams import dead_letters
from streams.batching import Completion
from streams.table_writes import TableWrites
from streams.worker.delivery import batcher, complete, dead_letter
from streams.worker.leases import apply_item
from streams.worker.state import Worker, WorkerState


def read_scope_record(value: bytes) -> list:
    """The entries and lease/budget events of one ``fb.scope-entries`` record (one of
    ``streams.dead_letters.READ_ERRORS`` if it is malformed)."""
    record = orjson.loads(value)
    kind = record["type"]
    if kind == ENTRIES_TYPE:
        return entries_of(record)
    return [ScopeEntry.from_wire(record) if kind == ENTRY_TYPE else from_dict(record)]


class ScopeLedgerAgent:
    """The scopes changed since the last flush (each with its partition) and the grants and notices sent."""

    def __init__(self, w: Worker, state: WorkerState) -> None:
        self.w = w
        self.state = state
        self.changed: dict[str, int] = {}  # scope -> its partition; each written once per flush
        self.sent: list[asyncio.Future] = []  # grants and notices: in Kafka before the table writes

    async def handle(self, event: Any) -> None:
        try:
            items = read_scope_record(event.value)
        except dead_letters.READ_ERRORS as exc:
            await dead_letter(self.w, self.state, event, exc)
            return
        for item in items:
            if await apply_item(self.w, self.state, item, self.sent):
                self.changed[item.scope] = event.message.partition

    async def flush(self) -> Completion:
        w, state = self.w, self.state
        sent, changed = self.sent, self.changed
        self.sent, self.changed = [], {}
        writes = TableWrites(w.app)
        for scope, partition in changed.items():  # the state as of this flush; the completion writes it
            writes.put(w.scope_ledger, partition, scope, state.live[scope].to_dict())
        return complete(sent, writes, lambda: state.dirty.update(changed))


def register(w: Worker, state: WorkerState) -> None:
    agent = ScopeLedgerAgent(w, state)

    @w.app.agent(w.entries, concurrency=1)
    async def scope_ledger(stream):  # type: ignore[no-untyped-def]
        await batcher(w, state, "scope", stream, agent.handle, agent.flush, w.cfg.scope_within_s).run()
