"""``SqliteIdempotency``: the idempotency store of one machine, on disk (embedded mode; the owner of
``serve --workers N`` holds it for every process).

Its records live in a SQLite file under ``state_dir`` instead of the process's memory: a day of answers (the
TTL) costs disk, not resident memory, so the gateway's memory stays flat however many idempotent requests it
serves; and a gateway restarted within a record's TTL still replays its answers, so a client's retry across the
restart is billed once. Expiry is wall-clock time (``time.time``) for the same reason.

One connection, used from one worker thread (``ThreadPoolExecutor(max_workers=1)``), so each operation reads and
writes its slot with no other operation in between: ``claim`` is atomic, as the contract asks. Each write is one
transaction (WAL, ``synchronous=NORMAL``: a crash of the machine may lose the last writes, never corrupt the
file). Expired rows are replaced when touched and swept every 1,024 writes; past ``max_bytes`` (the rows' size,
counted as they are written) the oldest answered records go first, never a pending claim (nothing in flight is
billed twice).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from proxy.idempotency.port import Claim, Record, SlotRules

DEFAULT_MAX_BYTES = 1024 * 1024 * 1024
ROW_OVERHEAD = 64  # the row's slot key, expiry, flags and b-tree cell, roughly
SWEEP_EVERY = 1024

_SCHEMA = """
CREATE TABLE IF NOT EXISTS fb_idempotency (
    slot TEXT PRIMARY KEY,
    data BLOB NOT NULL,
    expires REAL NOT NULL,
    answered INTEGER NOT NULL,
    seq INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS fb_idempotency_evict ON fb_idempotency (answered, seq);
"""


class SqliteIdempotency(SlotRules):
    def __init__(self, path: str | Path, max_bytes: int = DEFAULT_MAX_BYTES,
                 clock: Callable[[], float] = time.time) -> None:
        self.path, self.max_bytes, self.clock = Path(path), max_bytes, clock
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="idempotency")
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        size, seq = self._db.execute(
            f"SELECT COALESCE(SUM(length(data) + length(slot) + {ROW_OVERHEAD}), 0), COALESCE(MAX(seq), 0) "
            "FROM fb_idempotency").fetchone()
        self._bytes, self._seq, self._writes = int(size), int(seq), 0

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    # --- on the store's thread -------------------------------------------------------------

    def _get(self, slot: str) -> Record | None:
        row = self._db.execute("SELECT data, expires FROM fb_idempotency WHERE slot = ?", (slot,)).fetchone()
        if row is None or row[1] <= self.clock():
            return None
        return Record.loads(row[0])

    def _put(self, slot: str, record: Record, ttl_s: float) -> None:
        data = record.dumps()
        old = self._db.execute("SELECT length(data) FROM fb_idempotency WHERE slot = ?", (slot,)).fetchone()
        self._seq += 1
        self._db.execute("INSERT OR REPLACE INTO fb_idempotency (slot, data, expires, answered, seq) "
                         "VALUES (?, ?, ?, ?, ?)",
                         (slot, data, self.clock() + ttl_s, int(record.answer is not None), self._seq))
        self._bytes += len(data) - (old[0] if old else -len(slot) - ROW_OVERHEAD)
        self._writes += 1
        if self._writes % SWEEP_EVERY == 0:
            self._sweep()
        if self._bytes > self.max_bytes:
            self._evict()

    def _drop(self, slot: str) -> None:
        row = self._db.execute("DELETE FROM fb_idempotency WHERE slot = ? RETURNING length(data)", (slot,)).fetchone()
        if row is not None:
            self._bytes -= row[0] + len(slot) + ROW_OVERHEAD

    def _sweep(self) -> None:
        self._db.execute("DELETE FROM fb_idempotency WHERE expires <= ?", (self.clock(),))
        self._bytes = int(self._db.execute(
            f"SELECT COALESCE(SUM(length(data) + length(slot) + {ROW_OVERHEAD}), 0) FROM fb_idempotency").fetchone()[0])

    def _evict(self) -> None:
        """Drop the oldest answered records until the store is within ``max_bytes``."""
        over = self._bytes - self.max_bytes
        victims = []
        for slot, size in self._db.execute("SELECT slot, length(data) FROM fb_idempotency WHERE answered = 1 "
                                           "ORDER BY seq"):
            if over <= 0:
                break
            victims.append(slot)
            over -= size + len(slot) + ROW_OVERHEAD
        for slot in victims:
            self._drop(slot)

    # --- the port ------------------------------------------------------------------------------

    async def claim(self, slot: str, record: Record, ttl_s: float) -> Claim:
        return await self._run(self._claim, slot, record, ttl_s)  # type: ignore[no-any-return]

    async def complete(self, slot: str, done: Record, ttl_s: float) -> bool:
        return await self._run(self._complete, slot, done, ttl_s)  # type: ignore[no-any-return]

    async def release(self, slot: str, request_id: str) -> None:
        await self._run(self._release, slot, request_id)

    async def close(self) -> None:
        await self._run(self._db.close)
        self._pool.shutdown(wait=True)
