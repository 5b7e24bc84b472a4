"""Ledger checkpoints, so start-up folds only the events after the latest one.

A checkpoint is ``(offset, Ledger.to_bytes())``: the fold of exactly the log's
events 1..offset. It is a cache of the log, never a source of truth: a
checkpoint that cannot be read, was made in another time zone, or is ahead of
the log (a different or truncated log file) is skipped, down to a full fold.

Flush order (what makes a checkpoint at offset N safe):

1. the event at offset N was *read back from the log*, so the log acknowledged
   it (it is durable) and every event <= N is durable too;
2. it was applied to the ledger being checkpointed, and nothing else was:
   a checkpoint at offset N contains only events <= N that the log
   acknowledged (feed the ``Checkpointer`` from a fold of ``log.read``, not
   from a ledger that applies events before their append is acknowledged);
3. the checkpoint row is inserted and older ones beyond the last 3 deleted in
   ONE SQLite transaction (WAL, synchronous=FULL), so a crash leaves either
   the new checkpoint or the previous ones, never half of one.

A crash after 1-2 and before 3 loses nothing: the next start folds from the
previous checkpoint, and re-applying events is idempotent anyway.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

from ledger.balances import Ledger
from ledger.codec import format_time
from ledger.errors import CheckpointError
from streams.eventlog import EventLog

log = logging.getLogger(__name__)

KEEP = 3
PAGE = 10_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoints (
    "offset" INTEGER PRIMARY KEY,
    created  TEXT NOT NULL,
    blob     BLOB NOT NULL
);
"""
_PRUNE = 'DELETE FROM checkpoints WHERE "offset" NOT IN (SELECT "offset" FROM checkpoints ORDER BY "offset" DESC LIMIT ?)'


class CheckpointStore:
    """The last ``KEEP`` ledger checkpoints in a SQLite file; blocking work runs in a thread."""

    def __init__(self, path: str | os.PathLike[str], *, keep: int = KEEP) -> None:
        self.path = str(Path(path))
        self.keep = keep
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA busy_timeout = 5000")
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = FULL")
        self._conn.executescript(_SCHEMA)

    async def save(self, offset: int, ledger_bytes: bytes, *, created: datetime | None = None) -> None:
        """Store the ledger folded up to ``offset`` (see the flush order above); keep the last ``keep``."""
        stamp = format_time(created or datetime.now(timezone.utc))
        await asyncio.to_thread(self._save, offset, stamp, ledger_bytes)

    async def latest(self) -> tuple[int, bytes] | None:
        """The newest checkpoint, or None."""
        rows = await self.history(limit=1)
        return rows[0] if rows else None

    async def history(self, limit: int | None = None) -> list[tuple[int, bytes]]:
        """Kept checkpoints, newest first."""
        return await asyncio.to_thread(self._history, -1 if limit is None else limit)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def _save(self, offset: int, stamp: str, blob: bytes) -> None:
        with self._lock:
            cursor = self._conn.cursor()
            cursor.execute("BEGIN IMMEDIATE")
            try:
                cursor.execute(
                    'INSERT OR REPLACE INTO checkpoints ("offset", created, blob) VALUES (?, ?, ?)',
                    (offset, stamp, blob),
                )
                cursor.execute(_PRUNE, (self.keep,))
                cursor.execute("COMMIT")
            except BaseException:
                if self._conn.in_transaction:
                    cursor.execute("ROLLBACK")
                raise

    def _history(self, limit: int) -> list[tuple[int, bytes]]:
        with self._lock:
            sql = 'SELECT "offset", blob FROM checkpoints ORDER BY "offset" DESC LIMIT ?'
            return [(offset, bytes(blob)) for offset, blob in self._conn.execute(sql, (limit,))]


async def rebuild(
    log_: EventLog, store: CheckpointStore, tz: ZoneInfo, *, page: int = PAGE, closed_keep_s: int | None = None
) -> tuple[Ledger, int]:
    """The ledger at the end of the log: the newest usable checkpoint plus the events after it; with
    ``closed_keep_s`` its closed ids are kept for that window (``ledger.closed_ids``), a checkpoint from before
    the window included."""
    ledger, offset = await _from_checkpoint(log_, store, tz)
    if closed_keep_s is not None:
        ledger.keep_closed_for(closed_keep_s, datetime.now(timezone.utc))
    while True:
        batch = await log_.read(after=offset, limit=page)
        if not batch:
            return ledger, offset
        apply = ledger.apply
        for offset, event in batch:  # offset ends at the last event folded
            apply(event)


async def _from_checkpoint(log_: EventLog, store: CheckpointStore, tz: ZoneInfo) -> tuple[Ledger, int]:
    end = log_.last_offset
    for offset, blob in await store.history():
        if offset > end:
            log.warning("checkpoint at offset %d is ahead of the log (last offset %d): skipped", offset, end)
            continue
        try:
            ledger = Ledger.from_bytes(blob)
        except CheckpointError as exc:
            log.warning("checkpoint at offset %d is unreadable (%s): skipped", offset, exc)
            continue
        if ledger.tz.key != tz.key:
            log.warning("checkpoint at offset %d was made in zone %s, not %s: skipped", offset, ledger.tz.key, tz.key)
            continue
        return ledger, offset
    return Ledger(tz), 0


class Checkpointer:
    """Saves a checkpoint every ``every_events`` offsets or ``every_seconds``, whichever first.

    The caller drives it: after folding the log's event at ``offset`` into
    ``ledger``, ``await checkpointer.observe(offset, ledger)``.
    """

    def __init__(
        self,
        store: CheckpointStore,
        *,
        every_events: int = 100_000,
        every_seconds: float = 300.0,
        start_offset: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.every_events = every_events
        self.every_seconds = every_seconds
        self._clock = clock
        self.saved_offset = start_offset
        self._saved_at = clock()

    def due(self, offset: int) -> bool:
        if offset <= self.saved_offset:
            return False
        return offset - self.saved_offset >= self.every_events or self._clock() - self._saved_at >= self.every_seconds

    async def observe(self, offset: int, ledger: Ledger) -> bool:
        """Checkpoint if due; True when one was saved. ``ledger`` must be the fold of events 1..offset."""
        if not self.due(offset):
            return False
        await self.save(offset, ledger)
        return True

    async def save(self, offset: int, ledger: Ledger) -> None:
        blob = ledger.to_bytes()  # serialise now, before any await lets the ledger move on
        await self.store.save(offset, blob)
        self.saved_offset = offset
        self._saved_at = self._clock()
