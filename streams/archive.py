"""Parquet archive of the request events: immutable files by event date and hour.

Layout under the archive root::

    date=2026-10-03/hour=10/part-<partition>-<first offset>-<last offset>.parquet
    _unreadable/part-<partition>-<first offset>-<last offset>.parquet   # records that are not events
    _journal/<source>.json          # the batch being written (gone once committed)
    _state/<source>.json            # embedded mode: the last archived log offset

One row per event (``streams.archive_schema``): the envelope, ``stored_at``
(when the archiver wrote the row), ``log_partition``/``log_offset`` (where it
came from: a Kafka partition and offset, or partition 0 and the SQLite log
offset), typed columns for everything finance groups or sums by, and
``event`` (the full event JSON, as ``ledger.codec`` wrote it). Offsets are
zero-padded so names sort. Files are written once and never changed; a reader
refuses a file of a newer archive schema (``ArchiveError``).

Exactly once, per batch of one partition (flush order; tested by killing the
archiver between steps 2 and 3):

1. journal the batch's extent (partition, first, last offset): write, fsync, rename;
2. write its files: one per (date, hour) of the rows, each to a temp name,
   fsync, rename, fsync the folder;
3. commit: the Kafka consumer offset (last + 1), or the state file in embedded mode;
4. remove the journal.

A restart finds the journal and re-reads exactly first..last: the same rows
make the same file names, so the rewrite replaces files instead of adding
copies. Readers still dedupe on event id (``read_archive``), so a file copied
by hand or a producer-side duplicate in Kafka cannot double a row.

A record that ``ledger.codec`` cannot read (the worker sends it to the
dead-letter topic: ``streams.dead_letters``) is archived too, as it came, in
``_unreadable/`` (``UNREADABLE_SCHEMA``: where it came from, why, the bytes),
so the archive holds every record of the topic and the archiver never stops
on one. ``read_unreadable`` lists them; ``read_archive`` does not read them.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from ledger.codec import from_dict
from streams.archive_schema import ARCHIVE_SCHEMA_VERSION, SCHEMA, schema_version_of, typed_row
from streams.dead_letters import READ_ERRORS, reason_of
from streams.eventlog import EventLog

UNREADABLE_SCHEMA = pa.schema([
    ("log_partition", pa.int32()),
    ("log_offset", pa.int64()),
    ("stored_at", pa.timestamp("us", tz="UTC")),
    ("reason", pa.string()),
    ("value", pa.binary()),
])


@dataclass(frozen=True, slots=True)
class Record:
    """One event as read from a log: where it was, and its JSON bytes (``ledger.codec`` wire form)."""

    partition: int
    offset: int
    value: bytes


# --- writing ------------------------------------------------------------------------------


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, data: bytes) -> None:
    """Write, fsync, rename over ``path``, fsync the folder: all or nothing after a crash."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_path(path.parent)


def _row(record: Record, stored_at: datetime) -> dict:
    """The archive row of an event record (``streams.archive_schema``); raises one of ``READ_ERRORS`` if it
    is not an event ``ledger.codec`` reads (what the worker would send to its dead-letter topic)."""
    wire = orjson.loads(record.value)
    from_dict(wire)  # the whole event, as the worker reads it
    return typed_row(wire, stored_at=stored_at, partition=record.partition, offset=record.offset,
                     text=record.value.decode())


class ArchiveWriter:
    """Writes batches of one source (a topic, or the embedded log) with the journal protocol above."""

    def __init__(self, root: str | Path, source: str) -> None:
        self.root = Path(root)
        self.source = source.replace("/", "_")
        self._journal = self.root / "_journal" / f"{self.source}.json"

    def pending(self) -> dict[int, tuple[int, int]]:
        """Batches journaled but not known to be committed: partition -> (first, last offset)."""
        try:
            data = json.loads(self._journal.read_text())
        except FileNotFoundError:
            return {}
        return {int(p): (int(first), int(last)) for p, (first, last) in data.items()}

    def journal(self, extents: dict[int, tuple[int, int]]) -> None:
        """Step 1: record what is about to be written."""
        _write_atomic(self._journal, orjson.dumps({str(p): list(fl) for p, fl in extents.items()}))

    def write(self, records: list[Record], now: datetime | None = None) -> list[Path]:
        """Step 2: one file per (partition, date, hour) group; the same records make the same names."""
        stored_at = now or datetime.now(timezone.utc)
        groups: dict[tuple[int, str, str], list[dict]] = defaultdict(list)
        unreadable: dict[int, list[dict]] = defaultdict(list)
        for record in records:
            try:
                row = _row(record, stored_at)
            except READ_ERRORS as exc:
                unreadable[record.partition].append({
                    "log_partition": record.partition, "log_offset": record.offset, "stored_at": stored_at,
                    "reason": reason_of(exc), "value": record.value})
                continue
            at = row["event_time"]
            groups[(record.partition, f"{at:%Y-%m-%d}", f"{at:%H}")].append(row)
        written = []
        for partition, rows in sorted(unreadable.items()):
            name = f"part-{partition}-{rows[0]['log_offset']:020d}-{rows[-1]['log_offset']:020d}.parquet"
            written.append(self._write_rows(self.root / "_unreadable" / name, rows, UNREADABLE_SCHEMA))
        for (partition, day, hour), rows in sorted(groups.items()):
            rows.sort(key=lambda r: r["log_offset"])
            name = f"part-{partition}-{rows[0]['log_offset']:020d}-{rows[-1]['log_offset']:020d}.parquet"
            written.append(self._write_rows(self.root / f"date={day}" / f"hour={hour}" / name, rows, SCHEMA))
        return written

    @staticmethod
    def _write_rows(path: Path, rows: list[dict], schema: pa.Schema) -> Path:
        sink = pa.BufferOutputStream()
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), sink, compression="zstd")
        _write_atomic(path, sink.getvalue().to_pybytes())
        return path

    def done(self) -> None:
        """Step 4: the batch is committed."""
        self._journal.unlink(missing_ok=True)


# --- Kafka: fb.requests -> Parquet ---------------------------------------------------------


class KafkaArchiver:
    """Consumes one topic (all its partitions, manual assignment, manual commits) into the archive.

    Run one per topic (or pass ``partitions`` to split a topic between several).
    ``between_write_and_commit`` is a test hook (a crash point).
    """

    def __init__(self, bootstrap: str, topic: str, root: str | Path, *, group_id: str = "farebox-archiver",
                 partitions: Iterable[int] | None = None, batch_size: int = 5000,
                 between_write_and_commit: Callable[[], None] | None = None) -> None:
        self.bootstrap, self.topic, self.group_id = bootstrap, topic, group_id
        self.writer = ArchiveWriter(root, f"kafka-{topic}")
        self._partitions = None if partitions is None else sorted(partitions)
        self._batch = batch_size
        self._hook = between_write_and_commit
        self.archived = 0

    async def run(self, stop: asyncio.Event | None = None, until_caught_up: bool = False) -> int:
        """Archive until ``stop`` is set (or, with ``until_caught_up``, until the end offsets); events archived."""
        from aiokafka import AIOKafkaConsumer, TopicPartition
        from aiokafka.structs import OffsetAndMetadata

        from streams.kafka_clients import partitions_of, stop_consumer

        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group_id,
                                    enable_auto_commit=False, auto_offset_reset="earliest",
                                    isolation_level="read_committed")
        try:
            await consumer.start()
            parts = self._partitions if self._partitions is not None else await partitions_of(consumer, self.topic)
            tps = [TopicPartition(self.topic, p) for p in parts]
            consumer.assign(tps)

            async def commit(extents: dict[int, tuple[int, int]]) -> None:
                await consumer.commit({TopicPartition(self.topic, p): OffsetAndMetadata(last + 1, "")
                                       for p, (_, last) in extents.items()})

            for partition, (first, last) in sorted(self.writer.pending().items()):
                tp = TopicPartition(self.topic, partition)  # recovery: exactly the journaled batch again
                consumer.seek(tp, first)
                records: list[Record] = []
                while await consumer.position(tp) <= last:
                    got = await consumer.getmany(tp, timeout_ms=1000, max_records=last - first + 1)
                    records += [Record(partition, r.offset, r.value) for r in got.get(tp, []) if r.offset <= last]
                self.writer.write(records)
                await commit({partition: (first, last)})
                self.archived += len(records)
            self.writer.done()
            ends = await consumer.end_offsets(tps) if until_caught_up else {}
            while not (stop is not None and stop.is_set()):
                if until_caught_up and all([await consumer.position(tp) >= ends[tp] for tp in tps]):
                    break
                got = await consumer.getmany(*tps, timeout_ms=200, max_records=self._batch)
                records = [Record(tp.partition, r.offset, r.value) for tp, rs in got.items() for r in rs]
                if not records:
                    continue
                extents: dict[int, tuple[int, int]] = {}
                for record in records:
                    first, last = extents.get(record.partition, (record.offset, record.offset))
                    extents[record.partition] = (min(first, record.offset), max(last, record.offset))
                self.writer.journal(extents)
                self.writer.write(records)
                if self._hook is not None:
                    self._hook()
                await commit(extents)
                self.writer.done()
                self.archived += len(records)
            return self.archived
        finally:
            await stop_consumer(consumer)


# --- embedded mode: the SQLite log -> Parquet -------------------------------------------------


async def archive_from_log(log: EventLog, root: str | Path, *, state_path: str | Path | None = None,
                           batch_size: int = 5000,
                           between_write_and_commit: Callable[[], None] | None = None) -> int:
    """Archive everything after the last archived offset (kept in ``_state/log.json``); events archived."""
    from ledger.codec import encode

    writer = ArchiveWriter(root, "log")
    state = Path(state_path) if state_path else writer.root / "_state" / "log.json"
    try:
        last = int(json.loads(state.read_text())["last_offset"])
    except FileNotFoundError:
        last = 0
    archived = 0
    pending = writer.pending().get(0)
    if pending is not None:  # recovery: exactly the journaled batch again
        first, end = pending
        rows = await log.read(after=first - 1, limit=end - first + 1)
        writer.write([Record(0, offset, encode(event)) for offset, event in rows])
        last = end
        _write_atomic(state, orjson.dumps({"last_offset": last}))
        writer.done()
        archived += len(rows)
    while True:
        rows = await log.read(after=last, limit=batch_size)
        if not rows:
            return archived
        first, end = rows[0][0], rows[-1][0]
        writer.journal({0: (first, end)})
        writer.write([Record(0, offset, encode(event)) for offset, event in rows])
        if between_write_and_commit is not None:
            between_write_and_commit()
        _write_atomic(state, orjson.dumps({"last_offset": end}))
        writer.done()
        last = end
        archived += len(rows)


# --- reading --------------------------------------------------------------------------------


def archive_files(root: str | Path, start: date, end: date) -> list[Path]:
    """Parquet files whose event date is in [start, end], in name order."""
    root = Path(root)
    files: list[Path] = []
    day = start
    while day <= end:
        folder = root / f"date={day:%Y-%m-%d}"
        if folder.is_dir():
            files += sorted(folder.glob("hour=*/part-*.parquet"))
        day += timedelta(days=1)
    return files


class ArchiveError(Exception):
    """An archive file this build cannot read: corrupt, truncated, or of a newer schema. Names the file."""


def _read_file(path: Path, schema: pa.Schema) -> pa.Table:
    try:
        if schema is SCHEMA:
            version = schema_version_of(pq.read_schema(path).metadata)
            if version > ARCHIVE_SCHEMA_VERSION:
                raise ArchiveError(f"{path}: archive schema {version} is newer than this build reads "
                                   f"({ARCHIVE_SCHEMA_VERSION}); upgrade farebox to read it")
        return pq.read_table(path, schema=schema)
    except (pa.ArrowException, OSError) as exc:
        raise ArchiveError(f"{path}: not a readable archive file ({exc})") from None


def _first_of_each(files: list[Path], schema: pa.Schema, key: Callable[[pa.Table], Iterable]) -> pa.Table:
    """The rows of ``files`` by partition and offset, keeping the first row of each ``key``."""
    if not files:
        return schema.empty_table()
    table = pa.concat_tables(_read_file(f, schema) for f in files)
    table = table.sort_by([("log_partition", "ascending"), ("log_offset", "ascending")])
    seen: set = set()
    keep = []
    for value in key(table):
        keep.append(value not in seen)
        seen.add(value)
    return table.filter(pa.array(keep, type=pa.bool_()))


def read_unreadable(root: str | Path) -> pa.Table:
    """Every unreadable record archived (``_unreadable/``), by partition and offset, each once."""
    files = sorted((Path(root) / "_unreadable").glob("part-*.parquet"))
    return _first_of_each(files, UNREADABLE_SCHEMA, lambda t: zip(t.column("log_partition").to_pylist(),
                                                                  t.column("log_offset").to_pylist()))


def read_archive(root: str | Path, start: date, end: date, *, columns: list[str] | None = None) -> pa.Table:
    """Rows with event date in [start, end], each event id once (the first by partition and offset)."""
    table = _first_of_each(archive_files(root, start, end), SCHEMA, lambda t: t.column("id").to_pylist())
    return table if columns is None else table.select(columns)
