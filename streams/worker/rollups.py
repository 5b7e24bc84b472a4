"""The rollups agent (``fb.rollups``): rollup rows added into the ``rollups`` table, each close once.

Each record is one key's rows from one splitter flush, each row with the
``fb.requests`` offset of its close; ``ledger.rollups.apply_rows`` adds only
rows above the key's high-water offset per source, so a record delivered
twice, or rows a crashed splitter sent again, count once. A flush writes each
key it changed once, to the changelog partition of the record that changed it
(rollup keys are partitioned by key, so that is the key's own partition).
"""

from __future__ import annotations

from typing import Any

import orjson

from ledger.rollups import RollupTotal, apply_rows, check_record
from streams import dead_letters
from streams.batching import Completion
from streams.table_writes import TableWrites
from streams.worker.delivery import batcher, complete, dead_letter
from streams.worker.state import Worker, WorkerState


class RollupsAgent:
    """The running totals this batch changed: key -> (partition, total)."""

    def __init__(self, w: Worker, state: WorkerState) -> None:
        self.w = w
        self.state = state
        self.totals: dict[str, tuple[int, RollupTotal]] = {}

    async def handle(self, event: Any) -> None:
        try:
            if event.key is None:
                raise ValueError("a rollups record without a key")
            key, record = event.key.decode(), orjson.loads(event.value)
            check_record(record)
        except dead_letters.READ_ERRORS as exc:
            await dead_letter(self.w, self.state, event, exc)
            return
        pending = self.totals.get(key)
        total = pending[1] if pending is not None else RollupTotal.from_value(self.w.rollup_table.get(key))
        if apply_rows(total, record) or pending is not None:
            self.totals[key] = (event.message.partition, total)

    async def flush(self) -> Completion:
        writes = TableWrites(self.w.app)
        for key, (partition, total) in self.totals.items():
            writes.put(self.w.rollup_table, partition, key, total.to_value())
        self.totals = {}
        return complete([], writes)


def register(w: Worker, state: WorkerState) -> None:
    agent = RollupsAgent(w, state)

    @w.app.agent(w.rollups)
    async def rollups(stream):  # type: ignore[no-untyped-def]
        await batcher(w, state, "rollups", stream, agent.handle, agent.flush, w.cfg.rollup_within_s).run()
