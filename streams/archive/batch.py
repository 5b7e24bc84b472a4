"""One batch of log records as the archive reads it: decoded, checked as the worker reads them, laid out by file.

Unless the batch is ``trusted`` (the SQLite log, which only ``ledger.codec``
writes), every record must read as the worker reads it (``ledger.codec.from_dict``);
one that does not is refused with the error the worker would dead-letter it
for (one of ``streams.dead_letters.READ_ERRORS``), and the archive keeps it
apart. The check is made a group of like events at a time
(``ledger.codec_bulk.vouches``); a group it cannot vouch for goes through
``from_dict`` record by record, so the verdicts and the reasons are exactly
``from_dict``'s.

Records are decoded ``CHUNK`` at a time and, within a chunk, grouped by wire
shape (``streams.archive.schema.by_shape``); each group is transposed once into
columns that serve both the check and the typed Arrow arrays. The batch's rows
are then put file by file ((partition, date, hour), in that order) and by
offset within a file, as ``ArchiveWriter`` names and writes them.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from ledger.codec import from_dict
from ledger.codec_bulk import vouches
from streams.archive.schema import (
    CHUNK,
    GROUPED,
    Part,
    assemble,
    by_shape,
    concatenated,
    group_arrays,
    has_wide_digits,
    too_wide,
    transposed,
    used_fields,
)
from streams.dead_letters import READ_ERRORS

FileKey = tuple[int, str, str]  # (partition, date, hour) of one file's rows


@dataclass(frozen=True, slots=True)
class Record:
    """One event as read from a log: where it was, and its JSON bytes (``ledger.codec`` wire form)."""

    partition: int
    offset: int
    value: bytes


@dataclass(frozen=True, slots=True)
class Batch:
    """The batch read: ``files`` (each file's key and its rows: the readable events of that partition, date
    and hour by offset, in key order) and ``refused`` (record index -> why it does not read)."""

    files: list[tuple[FileKey, pa.Table]]
    refused: dict[int, BaseException]


def _refusal(wire: Any, partition: int, trusted: bool) -> BaseException:
    """Why a decoded record with no string ``time`` (or not an object) is refused: what taking its file key
    raises, or, when checking, what ``from_dict`` says (it refuses every such record)."""
    try:
        at = wire["time"]
        hash((partition, at[:10], at[11:13]))
        error: BaseException = TypeError(f"time is {type(at).__name__}, not a string")
    except READ_ERRORS as exc:
        error = exc
    if not trusted:
        try:
            from_dict(wire)
        except READ_ERRORS as exc:
            return exc
    return error


def _decoded(records: list[Record], start: int, stop: int,
             refused: dict[int, BaseException]) -> tuple[list[int], list[Any]]:
    """The record indices and wire objects of ``records[start:stop]`` that are JSON; the others refused."""
    values = [records[i].value for i in range(start, stop)]
    try:
        return list(range(start, stop)), list(map(orjson.loads, values))
    except READ_ERRORS:
        pass
    indices, wires = [], []
    for i, value in zip(range(start, stop), values):
        try:
            wires.append(orjson.loads(value))
            indices.append(i)
        except READ_ERRORS as exc:
            refused[i] = exc
    return indices, wires


def _readable(records: list[Record], trusted: bool, indices: list[int], fields: tuple[str, ...],
              group: list[dict], refused: dict[int, BaseException]) -> tuple[list[int], dict[str, tuple[Any, ...]]]:
    """Of one group of like events (``indices``: their records), the records that read and their columns;
    the others go into ``refused``. A string ``time`` is needed for the file; unless ``trusted``, reading
    as the worker reads is too: vouched for by the group (``vouches``), or else by ``from_dict`` one by one."""
    wanted = used_fields(fields) if trusted else fields  # the check reads every field; the arrays, only some
    columns = transposed(group, wanted) if "time" in fields else {"time": (None,) * len(group)}
    if set(map(type, columns["time"])) != {str}:
        keep = [type(t) is str for t in columns["time"]]
        for i, wire, ok in zip(indices, group, keep):
            if not ok:
                refused[i] = _refusal(wire, records[i].partition, trusted)
        indices = [i for i, ok in zip(indices, keep) if ok]
        group = [w for w, ok in zip(group, keep) if ok]
        columns = transposed(group, wanted)
    if trusted or not group or vouches(columns):
        return indices, columns
    kept, wires = [], []
    for i, wire in zip(indices, group):
        try:
            from_dict(wire)
        except READ_ERRORS as exc:
            refused[i] = exc
            continue
        kept.append(i)
        wires.append(wire)
    return kept, (columns if len(kept) == len(indices) else transposed(wires, fields))


def _wide(records: list[Record], start: int, stop: int) -> set[int]:
    """The indices of ``records[start:stop]`` whose JSON has a run of 19 digits: the only ones that can hold an
    integer outside 64 bits (one search of the joined chunk rules out the usual case)."""
    if not has_wide_digits(b" ".join([records[i].value for i in range(start, stop)])):
        return set()
    return {i for i in range(start, stop) if has_wide_digits(records[i].value)}


def _fitting(wire_of: dict[int, Any], wide: set[int], kept: list[int], columns: dict[str, tuple[Any, ...]],
             trusted: bool, fields: tuple[str, ...],
             refused: dict[int, BaseException]) -> tuple[list[int], dict[str, tuple[Any, ...]]]:
    """Of records that read (``kept``, their ``columns``), the ones the archive can hold: a record holding an
    integer outside 64 bits (``too_wide``; only those in ``wide`` can) goes into ``refused``."""
    for i in wide.intersection(kept):
        error = too_wide(wire_of[i])
        if error is not None:
            refused[i] = error
    if all(i not in refused for i in kept):
        return kept, columns
    kept = [i for i in kept if i not in refused]
    return kept, transposed([wire_of[i] for i in kept], used_fields(fields) if trusted else fields)


def _parts(records: list[Record], trusted: bool, refused: dict[int, BaseException]) -> list[Part]:
    """The readable events' arrays, ``CHUNK`` records at a time (decoded, checked and turned into Arrow arrays
    while their Python objects are still in the CPU's cache), grouped by wire shape within a chunk."""
    parts: list[Part] = []
    for start in range(0, len(records), CHUNK):
        indices, wires = _decoded(records, start, min(start + CHUNK, len(records)), refused)
        if set(map(type, wires)) != {dict}:  # a JSON array, string, number or null: not an event
            for i, wire in zip(indices, wires):
                if type(wire) is not dict:
                    refused[i] = _refusal(wire, records[i].partition, trusted)
            indices, wires = [i for i in indices if i not in refused], [w for w in wires if type(w) is dict]
        wide = _wide(records, start, min(start + CHUNK, len(records)))
        for fields, rows in by_shape(wires).items():
            group = wires if len(rows) == len(wires) else [wires[j] for j in rows]
            kept, columns = _readable(records, trusted, [indices[j] for j in rows], fields, group, refused)
            if wide and not wide.isdisjoint(kept):
                kept, columns = _fitting(dict(zip(indices, wires)), wide, kept, columns, trusted, fields, refused)
            if kept:
                parts.append((kept, group_arrays(fields, columns, len(kept))))
    return parts


def _runs(keys: pa.Table) -> list[tuple[int, int]]:
    """(start, end) of each run of equal rows of ``keys`` (sorted: one run per file)."""
    n = keys.num_rows
    changed = None
    for column in keys.columns:
        step = pc.not_equal(column.slice(1), column.slice(0, n - 1))
        changed = step if changed is None else pc.or_(changed, step)
    starts = [0, *(pc.add(pc.indices_nonzero(changed), 1).to_pylist() if n > 1 else []), n]
    return list(zip(starts, starts[1:]))


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off for a while, back as it was after. Decoding a batch makes tens of
    thousands of dicts and lists that form no cycle (reference counting frees them all); the collector's
    passes over them, triggered by the allocations alone, were a tenth of the batch's CPU time."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


@dataclass(frozen=True, slots=True)
class Columns:
    """The first half of reading a batch (``columns_of``): ``rows`` (the indices of the records that read, in
    the order of ``grouped``), their ``GROUPED`` arrays (None when no record read) and ``refused``."""

    rows: list[int]
    grouped: list[pa.Array] | None
    refused: dict[int, BaseException]


def columns_of(records: list[Record], trusted: bool) -> Columns:
    """Decode ``records`` (checking each as the worker would, unless ``trusted``) into their columns: the
    CPU-bound half of ``read_batch``, which ``streams.archive.pool`` runs a slice per process."""
    refused: dict[int, BaseException] = {}
    with _collector_paused():
        parts = _parts(records, trusted, refused)
    if not parts:
        return Columns([], None, refused)
    return Columns([i for kept, _ in parts for i in kept], concatenated(parts), refused)


class Decoding(Protocol):
    """A batch being decoded elsewhere: ``result()`` is ``columns_of(records, trusted)`` of the batch."""

    trusted: bool

    def result(self) -> Columns: ...


class Decoder(Protocol):
    """What decodes batches' columns on more cores: ``streams.archive.pool.DecodePool``."""

    def submit(self, records: list[Record], trusted: bool) -> Decoding: ...


def read_batch(records: list[Record], trusted: bool, stored_at: datetime, columns: Columns | None = None) -> Batch:
    """Decode ``records`` (checking each as the worker would, unless ``trusted``) and build each file's rows;
    ``columns``, when given, is ``columns_of(records, trusted)`` computed elsewhere (``streams.archive.pool``)."""
    got = columns if columns is not None else columns_of(records, trusted)
    if got.grouped is None:
        return Batch([], got.refused)
    rows, grouped = got.rows, got.grouped
    times = grouped[GROUPED.index("event_time")]  # "time" as written: its date and hour are its prefix
    keys = pa.table({"p": pa.array([records[i].partition for i in rows], pa.int32()),
                     "d": pc.utf8_slice_codeunits(times, 0, 10), "h": pc.utf8_slice_codeunits(times, 11, 13),
                     "o": pa.array([records[i].offset for i in rows], pa.int64()), "r": pa.array(rows, pa.int64())})
    order = pc.sort_indices(keys, [(key, "ascending") for key in ("p", "d", "h", "o", "r")])
    keys = keys.take(order)
    ordered = [records[i] for i in keys.column("r").to_pylist()]
    table = assemble([array.take(order) for array in grouped], [r.value for r in ordered], stored_at=stored_at,
                     partitions=[r.partition for r in ordered], offsets=[r.offset for r in ordered])
    files = []
    for start, end in _runs(keys.select(["p", "d", "h"])):
        key = (keys.column("p")[start].as_py(), keys.column("d")[start].as_py(), keys.column("h")[start].as_py())
        files.append((key, table.slice(start, end - start)))
    return Batch(files, got.refused)
