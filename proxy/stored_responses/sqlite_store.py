"""``SqliteResponses``: stored responses in a SQLite file, written in batches by one thread of their own.

The store of embedded and ``--workers`` pods (the processes of ``--workers`` share the file: WAL, one writer at
a time, readers alongside; the table is created if missing, by whichever process comes first). A ``put`` joins
the batch being gathered and returns once a transaction holding it is committed: while one batch is written the
next gathers, so under load many responses share one commit (group commit) and the event loop never waits on
the disk. Reads and deletes run on the same thread, after the writes queued before them (a follow-up naming a
response finds it). The schema is ``SqlResponses``'s (``proxy.stored_responses.sql``), so either adapter reads
the other's file. Expired rows are never returned and are swept every ``sweep_every`` writes.

``inline`` (a pod that is the file's only writer: embedded mode) writes on the event loop instead, one short
transaction per response (tens of µs, less CPU than handing it to a thread), with SQLite's automatic
checkpoint off: the thread checkpoints the WAL (PASSIVE, never blocking the writer) every ``checkpoint_every``
writes, and a sweep deletes at most ``sweep_rows`` expired rows, so no write waits on a long one.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from proxy.stored_responses.port import StoredResponse

_SCHEMA = ("CREATE TABLE IF NOT EXISTS stored_responses (id VARCHAR(96) NOT NULL PRIMARY KEY, "
           "team VARCHAR(200) NOT NULL, expires_at BIGINT NOT NULL, record BLOB NOT NULL)",
           "CREATE INDEX IF NOT EXISTS ix_stored_responses_expires_at ON stored_responses (expires_at)")


class SqliteResponses:
    def __init__(self, path: str | Path, *, sweep_every: int = 1000, inline: bool = False,
                 checkpoint_every: int = 256, sweep_rows: int = 500) -> None:
        self.path = str(path)
        self.sweep_every = sweep_every
        self.inline, self.checkpoint_every, self.sweep_rows = inline, checkpoint_every, sweep_rows
        self.writes = 0
        self.thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fb-stored-responses")
        self.pending: list[tuple[tuple[str, str, int, bytes], asyncio.Future[None]]] = []
        self.writer: asyncio.Task[None] | None = None
        self.checkpointing: Future[None] | None = None
        self.conn: sqlite3.Connection = self._open() if inline else self.thread.submit(self._open).result()
        self.checkpointer: sqlite3.Connection | None = self.thread.submit(self._open).result() if inline else None

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        if self.inline:
            conn.execute("PRAGMA wal_autocheckpoint=0")
        for statement in _SCHEMA:
            conn.execute(statement)
        return conn

    def _checkpoint(self) -> None:
        assert self.checkpointer is not None
        self.checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def _write(self, rows: list[tuple[str, str, int, bytes]]) -> None:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany("INSERT OR REPLACE INTO stored_responses (id, team, expires_at, record) "
                             "VALUES (?, ?, ?, ?)", rows)
            before, self.writes = self.writes, self.writes + len(rows)
            if before // self.sweep_every != self.writes // self.sweep_every:
                conn.execute("DELETE FROM stored_responses WHERE id IN (SELECT id FROM stored_responses "
                             "WHERE expires_at <= ? LIMIT ?)", (int(time.time()), self.sweep_rows))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    async def put(self, record: StoredResponse) -> None:
        await self.put_nowait(record)

    def put_nowait(self, record: StoredResponse) -> asyncio.Future[None]:
        """Queue ``record`` for the next batch; the future resolves once a commit holds it (or fails)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        row = (record.id, record.team, record.expires_at, record.dumps())
        if self.inline:
            try:
                self._write([row])
            except Exception as exc:  # noqa: BLE001 - the caller learns it through the future
                future.set_exception(exc)
                return future
            future.set_result(None)
            if self.writes % self.checkpoint_every == 0 and (self.checkpointing is None or self.checkpointing.done()):
                self.checkpointing = self.thread.submit(self._checkpoint)
            return future
        self.pending.append((row, future))
        if self.writer is None or self.writer.done():
            self.writer = asyncio.create_task(self._drain())
        return future

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while self.pending:
            batch, self.pending = self.pending, []
            try:
                await loop.run_in_executor(self.thread, self._write, [row for row, _ in batch])
            except Exception as exc:  # noqa: BLE001 - every put of the batch learns it (the keeper logs it)
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for _, future in batch:
                if not future.done():
                    future.set_result(None)

    def _get(self, response_id: str, now: float) -> bytes | None:
        row = self.conn.execute("SELECT record FROM stored_responses WHERE id = ? AND expires_at > ?",
                                (response_id, now)).fetchone()
        return None if row is None else bytes(row[0])

    def _delete(self, response_id: str) -> bool:
        return self.conn.execute("DELETE FROM stored_responses WHERE id = ?", (response_id,)).rowcount > 0

    async def get(self, response_id: str, now: float) -> StoredResponse | None:
        if self.inline:
            raw = self._get(response_id, now)
        else:
            raw = await asyncio.get_running_loop().run_in_executor(self.thread, self._get, response_id, now)
        return None if raw is None else StoredResponse.loads(raw)

    async def delete(self, response_id: str) -> bool:
        if self.inline:
            return self._delete(response_id)
        return await asyncio.get_running_loop().run_in_executor(self.thread, self._delete, response_id)

    async def close(self) -> None:
        if self.writer is not None:
            await asyncio.gather(self.writer, return_exceptions=True)
        if self.inline:
            self.conn.close()
            if self.checkpointer is not None:
                await asyncio.get_running_loop().run_in_executor(self.thread, self._checkpoint)
                await asyncio.get_running_loop().run_in_executor(self.thread, self.checkpointer.close)
        else:
            await asyncio.get_running_loop().run_in_executor(self.thread, self.conn.close)
        self.thread.shutdown(wait=True)
