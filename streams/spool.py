"""A local disk spool: an append-only file of records, fsynced in groups.

The Kafka event log writes here while Kafka is unreachable; an append is
acknowledged once it is on disk, and the records are read back in order and
replayed when Kafka returns, then the file is truncated.

File format: a sequence of frames ``[u32 length][u32 crc32][record]``
(little-endian). On open the file is scanned; a torn or corrupt tail (a crash
mid-write) is cut off at the last good frame. Only whole, fsynced frames were
ever acknowledged, so cutting the tail loses nothing that was acknowledged.

Write path, in order (the same as ``streams.sqlite_log``):

1. ``append`` (event-loop thread) puts the record and a future on a queue.
2. The writer thread takes everything queued, writes it with one ``write``,
   then ``fdatasync``; a truncate request in the queue runs in its place in
   the order.
3. Only then does it resolve the group's futures (one ``call_soon_threadsafe``
   per group) with the file position just past each record, so ``durable_end``
   in the event loop never runs ahead of the disk.
"""

from __future__ import annotations

import asyncio
import os
import queue
import struct
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path

from streams.eventlog import EventLogClosed, EventLogFailed

_FRAME = struct.Struct("<II")
MAX_GROUP = 10_000


@dataclass(slots=True)
class _Write:
    frame: bytes
    future: asyncio.Future[int]


@dataclass(slots=True)
class _Truncate:
    future: asyncio.Future[int]


@dataclass(slots=True)
class _Stop:
    future: asyncio.Future[int]


def frame(record: bytes) -> bytes:
    return _FRAME.pack(len(record), zlib.crc32(record)) + record


def scan(data: bytes, start: int = 0) -> tuple[list[tuple[int, bytes]], int]:
    """Whole, checksummed frames from ``start``: ([(end position, record)], end of the last good frame)."""
    out: list[tuple[int, bytes]] = []
    pos = start
    while pos + _FRAME.size <= len(data):
        length, crc = _FRAME.unpack_from(data, pos)
        end = pos + _FRAME.size + length
        if end > len(data):
            break
        record = data[pos + _FRAME.size : end]
        if zlib.crc32(record) != crc:
            break
        out.append((end, record))
        pos = end
    return out, pos


class Spool:
    """Use ``Spool.open(path)``. Appends and truncates are ordered; reads see only fsynced frames."""

    def __init__(self, path: Path, durable_end: int) -> None:
        self.path = path
        self.durable_end = durable_end  # event-loop view: every byte before it is on disk
        self.pending = 0  # appends queued but not yet on disk
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._queue: queue.SimpleQueue[_Write | _Truncate | _Stop] = queue.SimpleQueue()
        self._failure: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._write_loop, name=f"spool-writer:{path}", daemon=True)
        self._thread.start()

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> "Spool":
        """Open (creating) the spool at ``path``, cutting a torn tail left by a crash."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        good = 0
        if path.exists():
            data = path.read_bytes()
            _, good = scan(data)
            if good < len(data):
                with open(path, "r+b") as f:
                    f.truncate(good)
                    os.fsync(f.fileno())
        spool = cls(path, good)
        _fsync_dir(path.parent)
        return spool

    @property
    def empty(self) -> bool:
        return self.durable_end == 0 and self.pending == 0

    def append(self, record: bytes) -> asyncio.Future[int]:
        """Queue a record; the future resolves with the position after it once it is fsynced."""
        if self._failure is not None:
            raise EventLogFailed(f"the spool {self.path} failed: {self._failure}") from self._failure
        if self._closed:
            raise EventLogClosed(f"the spool {self.path} is closed")
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.pending += 1
        self._queue.put(_Write(frame(record), future))
        return future

    def truncate(self) -> asyncio.Future[int]:
        """Empty the file after everything queued before this call; ``durable_end`` becomes 0."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.durable_end = 0  # callers truncate only once they have consumed everything durable
        self._queue.put(_Truncate(future))
        return future

    def read(self, start: int, max_bytes: int = 4 << 20) -> list[tuple[int, bytes]]:
        """Records from byte ``start`` up to ``durable_end`` (blocking; call it in a thread)."""
        end = min(self.durable_end, start + max_bytes)
        if end <= start:
            return []
        with open(self.path, "rb") as f:
            f.seek(start)
            data = f.read(end - start)
        records, _ = scan(data)
        if not records and data:  # one record bigger than max_bytes
            return self.read(start, max_bytes * 2)
        return [(start + offset, record) for offset, record in records]

    def read_all(self) -> list[tuple[int, bytes]]:
        return self.read(0, max_bytes=max(self.durable_end, 1))

    async def close(self) -> None:
        """Wait for queued writes to reach the disk, then stop the writer thread; idempotent."""
        if not self._closed:
            self._closed = True
            future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            self._queue.put(_Stop(future))
            await future
        await asyncio.to_thread(self._thread.join)

    # --- internals ------------------------------------------------------------------

    def _write_loop(self) -> None:
        position = os.fstat(self._fd).st_size
        stop = False
        while not stop:
            group = [self._queue.get()]
            while len(group) < MAX_GROUP:
                try:
                    group.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            results: list[object] = []
            writes: list[bytes] = []
            try:
                for item in group:
                    if isinstance(item, _Write):
                        writes.append(item.frame)
                        position += len(item.frame)
                        results.append(position)
                    elif isinstance(item, _Truncate):
                        self._write_out(writes)
                        writes = []
                        os.ftruncate(self._fd, 0)
                        position = 0
                        results.append(0)
                    else:
                        stop = True
                        results.append(position)
                self._write_out(writes)
            except OSError as exc:  # fail-stop: nothing after a failed write is acknowledged
                self._failure = exc
                results = [EventLogFailed(f"the spool {self.path} failed: {exc}")] * len(group)
            self._resolve(group, results)
        os.close(self._fd)

    def _write_out(self, writes: list[bytes]) -> None:
        if self._failure is not None:
            raise OSError(f"earlier failure: {self._failure}")
        if writes:
            data = b"".join(writes)
            written = 0
            while written < len(data):
                written += os.write(self._fd, data[written:])
        os.fdatasync(self._fd)

    def _resolve(self, group: list[_Write | _Truncate | _Stop], results: list[object]) -> None:
        pairs = [(item, outcome) for item, outcome in zip(group, results)]
        try:
            group[0].future.get_loop().call_soon_threadsafe(self._settle, pairs)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    def _settle(self, pairs: list[tuple[_Write | _Truncate | _Stop, object]]) -> None:
        """In the event loop: account first, then resolve, so a woken waiter sees ``durable_end`` current."""
        for item, outcome in pairs:
            if isinstance(item, _Write):
                self.pending -= 1
                if not isinstance(outcome, BaseException):
                    self.durable_end = max(self.durable_end, outcome)  # type: ignore[call-overload]
        for item, outcome in pairs:
            if item.future.done():
                continue
            if isinstance(outcome, BaseException):
                item.future.set_exception(outcome)
            else:
                item.future.set_result(outcome)  # type: ignore[arg-type]


def _fsync_dir(path: Path) -> None:
    """Make the file's directory entry durable too (a new spool file must survive a crash)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
