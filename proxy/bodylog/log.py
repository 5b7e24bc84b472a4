"""``BodyLog``: the shell between the request path and the sealed store.

``record`` is called on the request path and only queues (no sealing, no
I/O); ``run`` seals and writes what is queued every ``flush_s`` and deletes
rows older than ``retention_s`` every ``sweep_s``; ``read`` opens one row
for the admin route. The queue is bounded (``max_pending``): past it a body
is dropped and counted (``dropped``), never blocking a request. On shutdown
``close`` writes what is still queued.

Invariant: plaintext bodies exist only in this queue (the request's memory
until the next flush) and in the answer of an audited read; the store holds
sealed blobs, events and logs never hold bodies.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson

from proxy.bodylog.cipher import TeamCipher
from proxy.bodylog.store import BodyStore, SealedRow

log = logging.getLogger("farebox.proxy")

RETENTION_S = 30 * 86_400


class BodyLog:
    __slots__ = ("store", "cipher", "clock", "retention_s", "flush_s", "sweep_s", "max_pending", "_pending",
                 "dropped", "_last_sweep")

    def __init__(self, store: BodyStore, cipher: TeamCipher, *, clock: Callable[[], float] = time.time,
                 retention_s: float = RETENTION_S, flush_s: float = 0.5, sweep_s: float = 3600.0,
                 max_pending: int = 10_000) -> None:
        self.store, self.cipher, self.clock = store, cipher, clock
        self.retention_s, self.flush_s, self.sweep_s, self.max_pending = retention_s, flush_s, sweep_s, max_pending
        self._pending: list[tuple[str, str, float, bytes]] = []
        self.dropped = 0
        self._last_sweep = 0.0

    def record(self, team: str, request_id: str, request: Mapping[str, Any], answer: Mapping[str, Any]) -> None:
        """Queue one request's bodies (the caller's request and the answer it got)."""
        if len(self._pending) >= self.max_pending:
            self.dropped += 1
            return
        plain = orjson.dumps({"request": request, "answer": answer})
        self._pending.append((team, request_id, self.clock(), plain))

    async def flush(self) -> int:
        """Seal and write what is queued; how many rows."""
        batch, self._pending = self._pending, []
        if not batch:
            return 0
        rows = [SealedRow(rid, team, datetime.fromtimestamp(at, timezone.utc), self.cipher.seal(team, rid, plain))
                for team, rid, at, plain in batch]
        try:
            await asyncio.to_thread(self.store.add, rows)
        except Exception as exc:  # the store is down: the bodies are lost, loudly (never retried into memory)
            self.dropped += len(rows)
            log.error("body log write failed (%s): %d bodies dropped", type(exc).__name__, len(rows))
        return len(rows)

    async def sweep(self) -> int:
        """Delete rows past retention; how many."""
        cutoff = datetime.fromtimestamp(self.clock() - self.retention_s, timezone.utc)
        self._last_sweep = self.clock()
        return await asyncio.to_thread(self.store.delete_before, cutoff)

    async def read(self, request_id: str) -> dict[str, Any] | None:
        """One request's bodies, opened with its team's key (the caller audits the read)."""
        row = await asyncio.to_thread(self.store.get, request_id)
        if row is None:
            return None
        opened = orjson.loads(self.cipher.open(row.team, row.request_id, row.sealed))
        expires = row.created_at + timedelta(seconds=self.retention_s)
        return {"request_id": row.request_id, "team": row.team, "created_at": row.created_at.isoformat(),
                "expires_at": expires.isoformat(), **opened}

    async def run(self) -> None:
        """Flush and sweep until cancelled."""
        while True:
            await asyncio.sleep(self.flush_s)
            await self.flush()
            if self.clock() - self._last_sweep >= self.sweep_s:
                try:
                    gone = await self.sweep()
                except Exception as exc:  # noqa: BLE001 - retried at the next sweep
                    log.error("body log sweep failed: %s", type(exc).__name__)
                else:
                    if gone:
                        log.info("body log: %d bodies past retention deleted", gone)

    async def close(self) -> None:
        await self.flush()
        await asyncio.to_thread(self.store.close)
