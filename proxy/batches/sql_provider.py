"""The batch store's part for batches a provider runs (``ProviderBatchStore``), mixed into ``SqlBatches``.

A provider batch's ``provider`` block lives in its row's ``doc``; it moves by compare-and-set (``set_provider``),
so of two processes polling the same batch one moves it and the other sees the change. Its lines are
``provider`` until ``end_provider`` keeps the provider's results and ends the batch in one transaction (the
first to end it wins; a second finds it ended and changes nothing).
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Sequence

import orjson
import sqlalchemy as sa

from proxy.batches.records import ACTIVE, BatchRecord, ProviderLine
from proxy.batches.sql_end import end_batch
from proxy.batches.tables import BATCHES, LINES


class ProviderRows:
    engine: sa.Engine
    reader: sa.Engine

    def _get(self, batch_id: str) -> BatchRecord | None: ...  # (SqlBatches)

    def _provider_batches(self) -> list[BatchRecord]:
        with self.reader.connect() as conn:
            ids = [batch_id for batch_id, doc in conn.execute(
                sa.select(BATCHES.c.id, BATCHES.c.doc).where(BATCHES.c.status.in_(ACTIVE))
                .order_by(BATCHES.c.created_at)) if orjson.loads(doc).get("provider") is not None]
        return [b for b in (self._get(i) for i in ids) if b is not None]

    def _set_provider(self, batch_id: str, old: dict[str, Any], new: dict[str, Any]) -> bool:
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(BATCHES.c.doc).where(BATCHES.c.id == batch_id).with_for_update()).first()
            if row is None:
                return False
            doc = orjson.loads(row.doc)
            if doc.get("provider") != old:
                return False
            doc["provider"] = new
            conn.execute(BATCHES.update().where(BATCHES.c.id == batch_id).values(doc=orjson.dumps(doc)))
            return True

    def _batch_lines(self, batch_id: str) -> list[tuple[int, str, bytes]]:
        with self.reader.connect() as conn:
            return [(n, c, bytes(b)) for n, c, b in conn.execute(
                sa.select(LINES.c.number, LINES.c.custom_id, LINES.c.body).where(LINES.c.batch_id == batch_id)
                .order_by(LINES.c.number))]

    def _end_provider(self, batch_id: str, final: str, answers: Sequence[ProviderLine], now: int,
                      new_file_id: Callable[[], str],
                      unrun: Callable[[str, str], bytes]) -> BatchRecord | None:
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(BATCHES).where(BATCHES.c.id == batch_id).with_for_update()).first()
            if row is None or row.status not in ACTIVE:
                return None
            for a in answers:
                conn.execute(LINES.update().where(LINES.c.batch_id == batch_id, LINES.c.number == a.number,
                                                  LINES.c.state == "provider")
                             .values(state="done", ok=a.ok, result=a.result, request_id=a.request_id,
                                     cost_micro=a.cost_micro, list_micro=a.list_micro))
            end_batch(conn, row, final, now, new_file_id, unrun)
        return self._get(batch_id)

    async def provider_batches(self) -> list[BatchRecord]:
        return await asyncio.to_thread(self._provider_batches)

    async def set_provider(self, batch_id: str, old: dict[str, Any], new: dict[str, Any]) -> bool:
        return await asyncio.to_thread(self._set_provider, batch_id, old, new)

    async def batch_lines(self, batch_id: str) -> list[tuple[int, str, bytes]]:
        return await asyncio.to_thread(self._batch_lines, batch_id)

    async def end_provider(self, batch_id: str, final: str, answers: Sequence[ProviderLine], now: int,
                           new_file_id: Callable[[], str],
                           unrun: Callable[[str, str], bytes]) -> BatchRecord | None:
        return await asyncio.to_thread(self._end_provider, batch_id, final, answers, now, new_file_id, unrun)
