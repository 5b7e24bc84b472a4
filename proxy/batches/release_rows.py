"""The batch store's part for batches admitted whole (``proxy.batches.reserve``), mixed into ``SqlBatches``.

When such a batch ends, the same transaction lists the lines whose holds no run used (still ``pending`` at their
first request id: never run, or turned away before admission) in the batch's ``reserved["release"]`` and marks
the batch ``releasing``. A process then releases those holds (``proxy.batches.reserve_run``) and says so
(``released``); a process that dies between the two leaves the batch ``releasing`` for the next one, whose events
have the same ids (each kept once). A line left ``claimed`` by a process that died is not listed: it may have been
served, so its hold expires charged in full, as any request's that never settled.
"""

from __future__ import annotations

import asyncio

import orjson
import sqlalchemy as sa

from proxy.batches.records import BatchRecord
from proxy.batches.tables import BATCHES, LINES


class ReservedRows:
    engine: sa.Engine
    reader: sa.Engine

    def _get(self, batch_id: str) -> BatchRecord | None: ...  # (SqlBatches)

    @staticmethod
    def _unrun(conn: sa.Connection, batch_id: str) -> list[list[int]]:
        """Before the batch ends (inside that transaction): its lines whose holds no run used."""
        return [[n, held] for n, held in conn.execute(
            sa.select(LINES.c.number, LINES.c.held_micro).where(
                LINES.c.batch_id == batch_id, LINES.c.held_micro.is_not(None), LINES.c.generation == 0,
                LINES.c.state == "pending").order_by(LINES.c.number))]

    @staticmethod
    def _mark_release(conn: sa.Connection, batch_id: str, unrun: list[list[int]]) -> None:
        """Once it ended (same transaction): ``unrun`` kept in ``reserved["release"]``, the batch ``releasing``
        (nothing for a batch whose lines were admitted one by one)."""
        doc = orjson.loads(conn.scalar(sa.select(BATCHES.c.doc).where(BATCHES.c.id == batch_id)))
        if doc.get("reserved") is None:
            return
        doc["reserved"]["release"] = unrun
        conn.execute(BATCHES.update().where(BATCHES.c.id == batch_id)
                     .values(doc=orjson.dumps(doc), releasing=True if unrun else None))

    def _releasing(self) -> list[BatchRecord]:
        with self.reader.connect() as conn:
            ids = list(conn.scalars(sa.select(BATCHES.c.id).where(BATCHES.c.releasing.is_(True))
                                    .order_by(BATCHES.c.created_at)))
        return [b for b in (self._get(i) for i in ids) if b is not None]

    def _released(self, batch_id: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(BATCHES.update().where(BATCHES.c.id == batch_id).values(releasing=None))

    async def releasing(self) -> list[BatchRecord]:
        return await asyncio.to_thread(self._releasing)

    async def released(self, batch_id: str) -> None:
        await asyncio.to_thread(self._released, batch_id)
