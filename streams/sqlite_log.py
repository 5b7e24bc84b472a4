"""SQLite adapter of the EventLog port (embedded mode).

One append-only table in a WAL-mode database with ``synchronous=FULL``, so a
committed transaction survives a crash of the process (and of the machine).

Write path, in order:

1. ``append`` (event-loop thread) creates a future and puts it and the event
   on a queue; it never blocks and does not encode (events are immutable, so
   encoding later yields the same bytes): the encode stays off the response path.
2. The single writer thread takes everything queued (group commit, at most
   ``MAX_BATCH``), encodes the batch, inserts it in ONE transaction and commits;
   an id already in the table (or earlier in the batch) is skipped and answered
   with its existing offset. An event that cannot be encoded fails its own
   future only and is not stored.
3. Only after COMMIT returns does it resolve the batch's futures, with one
   ``loop.call_soon_threadsafe`` per batch. So an acknowledged event is on disk.

``flush`` and ``close`` are barriers travelling through the same queue. Reads
use their own connection in a worker thread and see committed rows only.
Triggers refuse UPDATE and DELETE: the log is append-only.
"""

from __future__ import annotations

import asyncio
import os
import queue
import sqlite3
import threading
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import orjson

from ledger.codec import decode, to_dict
from ledger.events import Event
from streams.eventlog import EventLogClosed, EventLogFailed

MAX_BATCH = 10_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    "offset" INTEGER PRIMARY KEY,
    id       TEXT NOT NULL UNIQUE,
    type     TEXT NOT NULL,
    key      TEXT,
    time     TEXT NOT NULL,
    payload  BLOB NOT NULL
);
CREATE TRIGGER IF NOT EXISTS events_no_update BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_no_delete BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;
"""
_INSERT_MANY = 'INSERT INTO events ("offset", id, type, key, time, payload) VALUES '
_ROW = "(?, ?, ?, ?, ?, ?)"
_ROWS_PER_INSERT = 500  # 3,000 parameters per statement, well under SQLite's 32,766
_IDS_PER_SELECT = 900
_READ = 'SELECT "offset", payload FROM events WHERE "offset" > ? ORDER BY "offset" LIMIT ?'
_LAST = 'SELECT coalesce(max("offset"), 0) FROM events'


@dataclass(slots=True)
class _Append:
    event: Event
    future: asyncio.Future[int]


@dataclass(slots=True)
class _Barrier:
    future: asyncio.Future[None]
    stop: bool = False


def _connect(path: str, readonly: bool) -> sqlite3.Connection:
    uri = f"file:{path}?mode={'ro' if readonly else 'rwc'}"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 5000")
    return conn


class SqliteEventLog:
    """Use ``SqliteEventLog.open(path)``; ``readonly=True`` for a reader in another process."""

    def __init__(self, path: str, reader: sqlite3.Connection, writer: sqlite3.Connection | None) -> None:
        self.path = path
        self._reader = reader
        self._read_lock = threading.Lock()
        self._reader_closed = False
        self._writer = writer
        self._queue: queue.SimpleQueue[_Append | _Barrier] = queue.SimpleQueue()
        self._closed = writer is None
        self._close_barrier: asyncio.Future[None] | None = None
        self._failure: BaseException | None = None
        self._last_offset = reader.execute(_LAST).fetchone()[0]
        self._thread: threading.Thread | None = None
        if writer is not None:
            self._thread = threading.Thread(target=self._write_loop, name=f"eventlog-writer:{path}", daemon=True)
            self._thread.start()

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, readonly: bool = False) -> "SqliteEventLog":
        """Open (creating it and its folder if needed) the log at ``path`` and start its writer thread."""
        path = str(Path(path))
        writer = None
        if not readonly:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            writer = _connect(path, readonly=False)
            writer.execute("PRAGMA journal_mode = WAL")
            writer.execute("PRAGMA synchronous = FULL")
            writer.executescript(_SCHEMA)
        return cls(path, _connect(path, readonly=readonly), writer)

    # --- the port --------------------------------------------------------------

    def append(self, event: Event) -> asyncio.Future[int]:
        if self._failure is not None:
            raise EventLogFailed(f"the event log {self.path} failed: {self._failure}") from self._failure
        if self._closed:
            why = "opened read-only" if self._writer is None and not self._reader_closed else "closed"
            raise EventLogClosed(f"the event log {self.path} is {why}")
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._queue.put(_Append(event, future))
        return future

    async def flush(self) -> None:
        if self._writer is None or self._thread is None or not self._thread.is_alive():
            self._raise_if_failed()
            return
        barrier = _Barrier(asyncio.get_running_loop().create_future())
        self._queue.put(barrier)
        await barrier.future

    async def read(self, after: int = 0, limit: int = 1000) -> list[tuple[int, Event]]:
        if self._reader_closed:
            raise EventLogClosed(f"the event log {self.path} is closed")
        return await asyncio.to_thread(self._read, after, limit)

    async def read_payloads(self, after: int = 0, limit: int = 1000) -> list[tuple[int, bytes]]:
        """As ``read``, but the stored JSON bytes, undecoded (``ledger.codec`` wrote them: the archiver copies)."""
        if self._reader_closed:
            raise EventLogClosed(f"the event log {self.path} is closed")
        return await asyncio.to_thread(self._read_payloads, after, limit)

    async def close(self) -> None:
        if self._writer is not None and self._close_barrier is None:
            self._closed = True
            self._close_barrier = asyncio.get_running_loop().create_future()
            self._queue.put(_Barrier(self._close_barrier, stop=True))
        try:
            if self._close_barrier is not None:
                await asyncio.shield(self._close_barrier)
        finally:
            if self._thread is not None:
                self._thread.join()
            with self._read_lock:
                self._reader.close()
                self._reader_closed = True
            self._closed = True

    @property
    def last_offset(self) -> int:
        if self._writer is None and not self._reader_closed:
            with self._read_lock:  # read-only: another process writes, so ask the file
                return self._reader.execute(_LAST).fetchone()[0]
        return self._last_offset

    # --- internals -------------------------------------------------------------

    def _read(self, after: int, limit: int) -> list[tuple[int, Event]]:
        return [(offset, decode(payload)) for offset, payload in self._read_payloads(after, limit)]

    def _read_payloads(self, after: int, limit: int) -> list[tuple[int, bytes]]:
        with self._read_lock:
            return self._reader.execute(_READ, (after, limit)).fetchall()

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise EventLogFailed(f"the event log {self.path} failed: {self._failure}") from self._failure

    def _write_loop(self) -> None:
        assert self._writer is not None
        cursor = self._writer.cursor()
        stop = False
        while not stop:
            batch = [self._queue.get()]
            while len(batch) < MAX_BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = any(isinstance(item, _Barrier) and item.stop for item in batch)
            rows, refused = _encode_batch(batch)
            offsets = self._commit(cursor, rows)
            self._resolve(batch, offsets, refused)
        self._writer.close()

    def _commit(self, cursor: sqlite3.Cursor, appends: list[_Row]) -> list[int] | BaseException:
        """Insert a batch in one transaction; the offset of each row (existing one for a duplicate id)."""
        if self._failure is not None:
            return self._failure
        if not appends:
            return []
        try:
            # IMMEDIATE takes the write lock first, so max(offset) cannot move under us and the
            # offsets we assign are exactly the ones stored. Multi-row statements keep the
            # sqlite3 module from releasing and re-taking the GIL once per row.
            cursor.execute("BEGIN IMMEDIATE")
            last = cursor.execute(_LAST).fetchone()[0]
            ids = [row[0] for row in appends]
            known: dict[str, int] = {}
            for chunk in _chunks(ids, _IDS_PER_SELECT):
                sql = f'SELECT id, "offset" FROM events WHERE id IN ({",".join("?" * len(chunk))})'
                known.update(cursor.execute(sql, chunk).fetchall())
            offsets: list[int] = []
            rows: list[object] = []
            for row in appends:
                offset = known.get(row[0])
                if offset is None:
                    last += 1
                    offset = known[row[0]] = last
                    rows.append(offset)
                    rows.extend(row)
                offsets.append(offset)
            for chunk in _chunks(rows, _ROWS_PER_INSERT * 6):
                cursor.execute(_INSERT_MANY + ",".join([_ROW] * (len(chunk) // 6)), chunk)
            cursor.execute("COMMIT")
        except BaseException as exc:  # fail-stop: nothing after a failed commit is acknowledged
            self._failure = exc
            try:
                if self._writer is not None and self._writer.in_transaction:
                    cursor.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # the connection is broken; the transaction dies with it
            return exc
        self._last_offset = last
        return offsets

    def _resolve(self, batch: list[_Append | _Barrier], offsets: list[int] | BaseException,
                 refused: dict[int, BaseException]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future, object]]] = defaultdict(list)
        results = iter(offsets) if isinstance(offsets, list) else None
        for n, item in enumerate(batch):
            if n in refused:
                outcome: object = EventLogFailed(f"event not stored: it cannot be encoded: {refused[n]}")
            elif results is None:
                outcome = EventLogFailed(f"the event log {self.path} failed: {offsets}")
            elif isinstance(item, _Append):
                outcome = next(results)
            else:
                outcome = None
            by_loop[item.future.get_loop()].append((item.future, outcome))
        for loop, pairs in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle, pairs)
            except RuntimeError:  # that loop is closed: nobody is waiting any more
                pass


_Row = tuple[str, str, str | None, str, bytes]


def _encode_batch(batch: list[_Append | _Barrier]) -> tuple[list[_Row], dict[int, BaseException]]:
    """The rows of a batch's appends, in order, and the batch positions of events that cannot be encoded."""
    rows: list[_Row] = []
    refused: dict[int, BaseException] = {}
    for n, item in enumerate(batch):
        if isinstance(item, _Append):
            try:
                wire = to_dict(item.event)  # its id and time as the payload holds them: built once
                rows.append((wire["id"], wire["type"], wire["key"], wire["time"], orjson.dumps(wire)))
            except Exception as exc:  # one bad event fails its own append, not the batch or the log
                refused[n] = exc
    return rows, refused


def _settle(pairs: list[tuple[asyncio.Future, object]]) -> None:
    for future, outcome in pairs:
        if future.done():  # cancelled by its owner
            continue
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)


def _chunks(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]
