"""Processes that decode a batch's records beside the archiver: its CPU-bound half, on every core.

Reading a batch (``streams.archive.batch``) is two halves. The first decodes
each record's JSON, checks it as the worker reads it and builds its typed
Arrow columns: about 20 µs of pure-Python work per event, holding the GIL.
The second orders the rows by file, assembles the tables and writes zstd
Parquet: mostly Arrow's C++, a few µs per event. ``DecodePool`` runs the
first half of one batch in ``processes`` spawned processes, a contiguous
slice of the records each, and hands the archiver back exactly what it would
have computed itself (``archive_batch.Columns``): the same rows, columns and
refusals, so the files, names and manifest entries are the same bytes with
or without a pool (``tests/streams/test_archive_pool.py`` holds them equal).

Invariants:

* a slice's answer is the in-process answer for those records, re-indexed
  to the batch; the slices are put back in record order;
* a slice that fails in its process (the process died, or its answer could
  not travel back, e.g. an exception that does not pickle) is decoded in the
  archiver's own process instead: a pool never loses or changes a record,
  it only makes a batch faster;
* a batch smaller than two ``CHUNK``s is decoded in-process (shipping it
  costs more than it saves).

The columns travel as one Arrow IPC stream per slice (its buffers copied once
each way), the records as their bytes and partitions.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import pyarrow as pa

from streams.archive.batch import Columns, Record, columns_of
from streams.archive.schema import CHUNK, GROUPED
from streams.orphans import leave_with

log = logging.getLogger("farebox.archive")

Shipped = tuple[list[int], bytes | None, dict[int, BaseException]]  # a slice's rows, IPC columns, refusals


def _ready(_: int) -> int:
    return os.getpid()


def _ship(values: list[bytes], partitions: list[int], trusted: bool) -> Shipped:
    """In a pool process: ``columns_of`` one slice, its columns as one Arrow IPC stream."""
    got = columns_of([Record(p, 0, v) for p, v in zip(partitions, values)], trusted)
    if got.grouped is None:
        return got.rows, None, got.refused
    batch = pa.record_batch(got.grouped, names=list(GROUPED))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return got.rows, sink.getvalue().to_pybytes(), got.refused


def _unship(shipped: Shipped) -> Columns:
    rows, data, refused = shipped
    if data is None:
        return Columns(rows, None, refused)
    batch = pa.ipc.open_stream(data).read_next_batch()
    return Columns(rows, list(batch.columns), refused)


def _slices(n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous (start, stop) slices of ``range(n)``, whole ``CHUNK``s each but the last."""
    chunks = -(-n // CHUNK)
    per = -(-chunks // parts)
    bounds = [min(i * per * CHUNK, n) for i in range(parts + 1)]
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def _executor(processes: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=processes, mp_context=multiprocessing.get_context("spawn"),
                               initializer=leave_with, initargs=(os.getpid(),))


class DecodePool:
    """``processes`` spawned processes that decode slices of a batch; ``close`` stops them. Thread-safe."""

    def __init__(self, processes: int) -> None:
        if processes < 1:
            raise ValueError(f"a decode pool needs at least one process, got {processes}")
        self.processes = processes
        self._executor = _executor(processes)
        self._lock = threading.Lock()

    def start(self) -> float:
        """Start the processes now (each imports pyarrow: 0.2-0.4 s here), not in the first batch; seconds taken."""
        started = time.perf_counter()
        list(self._executor.map(_ready, range(self.processes)))
        return time.perf_counter() - started

    def submit(self, records: list[Record], trusted: bool) -> Pending:
        """Start decoding ``records`` in the pool's processes; ``result()`` waits for ``columns_of``'s answer.
        The archiver reads and writes the previous batch meanwhile (``archive_write.archive_from_log``)."""
        if len(records) < 2 * CHUNK:
            return Pending(self, records, trusted, [], [])
        slices = _slices(len(records), self.processes)
        futures: list[Future[Shipped] | None] = []
        for start, stop in slices:
            part = records[start:stop]
            futures.append(self._submit([r.value for r in part], [r.partition for r in part], trusted))
        return Pending(self, records, trusted, slices, futures)

    def _submit(self, values: list[bytes], partitions: list[int], trusted: bool) -> Future[Shipped] | None:
        """The slice handed to a process, or None (decode it here): the pool is shut down, or broken and not
        renewable."""
        with self._lock:
            for _ in range(2):
                try:
                    return self._executor.submit(_ship, values, partitions, trusted)
                except BrokenProcessPool:  # a process died since the last batch: a new pool, once
                    self._renew()
                except RuntimeError:  # shut down
                    break
        log.warning("archive decode pool unavailable: decoding in the archiver")
        return None

    def _answer(self, future: Future[Shipped] | None, records: list[Record], trusted: bool) -> Columns:
        if future is not None:
            try:
                return _unship(future.result())
            except Exception as exc:  # a slice that did not come back is decoded here: never lost
                log.warning("archive decode pool: a slice failed (%s: %s); decoding it in the archiver",
                            type(exc).__name__, exc)
        return columns_of(records, trusted)

    def _renew(self) -> None:
        """A new executor for a broken one (the caller holds the lock)."""
        log.warning("archive decode pool: a process died; starting a new pool")
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._executor = _executor(self.processes)

    def close(self) -> None:
        with self._lock:
            self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> DecodePool:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()


class Pending:
    """A batch being decoded by a ``DecodePool``: ``result()`` is ``columns_of(records, trusted)``."""

    def __init__(self, pool: DecodePool, records: list[Record], trusted: bool, slices: list[tuple[int, int]],
                 futures: list[Future[Shipped] | None]) -> None:
        self.pool, self.records, self.trusted, self.slices, self.futures = pool, records, trusted, slices, futures

    def result(self) -> Columns:
        if not self.slices:
            return columns_of(self.records, self.trusted)
        got = [self.pool._answer(future, self.records[start:stop], self.trusted)
               for future, (start, stop) in zip(self.futures, self.slices)]
        return _merged(got, [start for start, _ in self.slices])


def _merged(parts: list[Columns], starts: list[int]) -> Columns:
    """The slices' answers as one batch's: rows and refusals shifted by each slice's start, columns joined."""
    rows: list[int] = []
    refused: dict[int, BaseException] = {}
    grouped: list[list[pa.Array]] = []
    for part, start in zip(parts, starts):
        rows += [start + i for i in part.rows]
        refused.update({start + i: exc for i, exc in part.refused.items()})
        if part.grouped is not None:
            grouped.append(part.grouped)
    if not grouped:
        return Columns(rows, None, refused)
    if len(grouped) == 1:
        return Columns(rows, grouped[0], refused)
    return Columns(rows, [pa.concat_arrays([g[c] for g in grouped]) for c in range(len(GROUPED))], refused)
