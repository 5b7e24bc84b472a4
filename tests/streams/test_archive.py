"""Parquet archive: layout, dedupe on read, and exactly once by id after a crash between write and commit."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
import uuid
from datetime import date, timedelta
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from stream_events import T0, make_event

from infra.kafka.topics import TopicSpec, create_topics
from ledger.codec import decode, encode
from streams.archive.kafka_source import KafkaArchiver
from streams.archive.pool import DecodePool
from streams.archive.read import archive_files, read_archive, read_unreadable
from streams.archive.schema import SCHEMA
from streams.archive.write import ArchiveWriter, Record, archive_from_log
from streams.kafka.log import KafkaEventLog
from streams.sqlite_log import SqliteEventLog

HERE = Path(__file__).parent
ROOT = HERE.parents[1]


def spread_event(i: int):
    """Events 7 minutes apart: 600 of them cover three dates and many hours."""
    return dataclasses.replace(make_event(i, team=f"t{i % 4}"), time=T0 + timedelta(minutes=7 * i))


def raw_ids(root: Path) -> list[str]:
    """Every row of every file, no dedupe: what is physically in the archive."""
    files = sorted(root.glob("date=*/hour=*/part-*.parquet"))
    return [i for f in files for i in pq.read_table(f, columns=["id"]).column("id").to_pylist()]


ALL_DAYS = (date(2026, 10, 1), date(2026, 10, 9))


async def test_embedded_archive_layout_columns_and_resume(tmp_path):
    log = SqliteEventLog.open(tmp_path / "events.db")
    events = [spread_event(i) for i in range(600)]
    for e in events:
        log.append(e)
    await log.flush()
    root = tmp_path / "archive"
    assert await archive_from_log(log, root, batch_size=128) == 600
    assert await archive_from_log(log, root) == 0  # state file: nothing twice
    table = read_archive(root, *ALL_DAYS)
    assert table.schema == SCHEMA
    assert table.column("id").to_pylist() == [e.id for e in events]
    first = table.slice(0, 1).to_pylist()[0]
    assert (first["type"], first["schema"], first["key"], first["log_offset"]) == (events[0].type, 1, "t0", 1)
    assert first["event_time"] == events[0].time and first["stored_at"] >= first["event_time"]
    assert decode(first["event"]) == events[0]
    names = {p.relative_to(root).parts[:2] for p in archive_files(root, *ALL_DAYS)}
    assert ("date=2026-10-03", "hour=10") in names and ("date=2026-10-05", "hour=15") in names
    one = archive_files(root, date(2026, 10, 4), date(2026, 10, 4))[0].name
    assert one.startswith("part-0-0000") and one.endswith(".parquet")
    one_day = read_archive(root, date(2026, 10, 4), date(2026, 10, 4))
    assert one_day.num_rows > 0 and {t.date() for t in one_day.column("event_time").to_pylist()} == {date(2026, 10, 4)}
    for e in [spread_event(i) for i in range(600, 650)]:
        log.append(e)
    await log.flush()
    assert await archive_from_log(log, root) == 50
    assert sorted(raw_ids(root)) == sorted(e.id for e in [spread_event(i) for i in range(650)])
    await log.close()


async def test_embedded_crash_between_write_and_commit_archives_once(tmp_path):
    log = SqliteEventLog.open(tmp_path / "events.db")
    for i in range(500):
        log.append(spread_event(i))
    await log.flush()
    root = tmp_path / "archive"

    class Crash(BaseException):
        pass

    def crash() -> None:
        raise Crash  # files durable, state file not yet written

    with pytest.raises(Crash):
        await archive_from_log(log, root, batch_size=200, between_write_and_commit=crash)
    assert len(raw_ids(root)) == 200  # the first batch is on disk, uncommitted
    for i in range(500, 520):  # more arrives meanwhile: the re-read must still be exactly the journaled batch
        log.append(spread_event(i))
    await log.flush()
    await archive_from_log(log, root, batch_size=300)
    ids = raw_ids(root)
    assert len(ids) == len(set(ids)) == 520
    await log.close()


def test_reader_dedupes_on_event_id(tmp_path):
    """A file copied by hand (or a duplicate delivered by Kafka) does not double a row on read."""

    writer = ArchiveWriter(tmp_path, "x")
    events = [spread_event(i) for i in range(20)]
    writer.write([Record(0, n + 1, encode(e)) for n, e in enumerate(events)])
    writer.write([Record(1, 100 + n, encode(e)) for n, e in enumerate(events[:5])])  # duplicates elsewhere
    assert len(raw_ids(tmp_path)) == 25
    assert read_archive(tmp_path, *ALL_DAYS).column("id").to_pylist() == [e.id for e in events]


async def crashed_archiver(kafka_broker, tmp_path: Path, prefix: str, events: list, partitions: int,
                           *crash_args: str) -> tuple[str, Path, str]:
    """``events`` in a new topic, then ``archiver_crash.py`` (``crash_args``: batch size, decode processes) run on
    it until it dies between its first write and commit; (topic, archive root, consumer group)."""
    topic = f"{prefix}-{uuid.uuid4().hex[:10]}"
    await create_topics(kafka_broker.bootstrap, [TopicSpec(topic, partitions=partitions)])
    log = KafkaEventLog(kafka_broker.bootstrap, tmp_path / "spool", requests_topic=topic, scope_topic=topic,
                        config_topic=topic)
    assert all(o >= 1 for o in await asyncio.gather(*(log.append(e) for e in events)))
    await log.close()
    root, group = tmp_path / "archive", f"archiver-{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)])}
    crashed = subprocess.run([sys.executable, str(HERE / "archiver_crash.py"), kafka_broker.bootstrap, topic,
                              str(root), group, *crash_args], env=env, cwd=ROOT, capture_output=True, text=True,
                             timeout=90)
    assert crashed.returncode == 1, crashed.stderr[-2000:]
    return topic, root, group


async def test_kafka_archiver_killed_between_write_and_commit_archives_each_id_once(kafka_broker, tmp_path):
    events = [spread_event(i) for i in range(900)]
    topic, root, group = await crashed_archiver(kafka_broker, tmp_path, "archive", events, 3)
    before = raw_ids(root)
    assert 0 < len(before) <= 250 and (root / "_journal").exists()
    archiver = KafkaArchiver(kafka_broker.bootstrap, topic, root, group_id=group, batch_size=250)
    await archiver.run(until_caught_up=True)
    ids = raw_ids(root)
    assert len(ids) == len(set(ids)), "a row was archived twice"
    assert set(ids) == {e.id for e in events}
    assert not list((root / "_journal").glob("*.json"))
    # a second run finds the committed offsets: nothing new
    assert await KafkaArchiver(kafka_broker.bootstrap, topic, root, group_id=group).run(until_caught_up=True) == 0
    table = read_archive(root, *ALL_DAYS)
    assert table.num_rows == 900 and pc.min(table.column("log_offset")).as_py() == 0


async def test_kafka_archiver_with_a_decode_pool_killed_while_reading_ahead_archives_each_id_once(kafka_broker,
                                                                                                 tmp_path):
    """With a decode pool and a backlog the archiver reads and decodes the next batch while it writes one; killed
    between a write and its commit (the next batch read, not written), a rerun with a pool archives every id
    once, and the rows are those an archiver without a pool writes."""
    events = [spread_event(i) for i in range(3_300)]
    topic, root, group = await crashed_archiver(kafka_broker, tmp_path, "archive-pool", events, 2, "1100", "2")
    assert 0 < len(raw_ids(root)) <= 1100 and (root / "_journal").exists()
    with DecodePool(2) as pool:
        archiver = KafkaArchiver(kafka_broker.bootstrap, topic, root, group_id=group, batch_size=1100, pool=pool)
        assert await archiver.run(until_caught_up=True) == 3_300
    ids = raw_ids(root)
    assert len(ids) == len(set(ids)) == 3_300, "a row was archived twice, or lost"
    assert set(ids) == {e.id for e in events}
    assert not list((root / "_journal").glob("*.json"))
    assert await KafkaArchiver(kafka_broker.bootstrap, topic, root, group_id=group).run(until_caught_up=True) == 0
    alone = tmp_path / "alone"
    assert await KafkaArchiver(kafka_broker.bootstrap, topic, alone, group_id=group + "-alone",
                               batch_size=1100).run(until_caught_up=True) == 3_300
    days = (date(2026, 10, 1), date(2026, 10, 25))

    def rows(at: Path) -> list[dict]:
        return sorted(read_archive(at, *days).drop_columns(["stored_at"]).to_pylist(), key=lambda r: r["id"])

    assert rows(root) == rows(alone)


POISON = [b"not json", b'{"type": "request.admitted", "schema": 99}', b"\xff\xfe", b'["a list"]']


async def test_unreadable_records_are_archived_apart_and_the_archiver_goes_on(kafka_broker, tmp_path):
    """Records ``ledger.codec`` cannot read (the worker dead-letters them) are kept as they came under
    ``_unreadable/``; the events around them are archived as usual, and a rerun adds nothing."""
    from aiokafka import AIOKafkaProducer

    topic = f"poison-{uuid.uuid4().hex[:10]}"
    await create_topics(kafka_broker.bootstrap, [TopicSpec(topic, partitions=1)])
    events = [spread_event(i) for i in range(30)]
    producer = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    await producer.start()
    try:
        for i, event in enumerate(events):
            await producer.send_and_wait(topic, encode(event), key=b"t0")
            if i % 10 == 4:
                await producer.send_and_wait(topic, POISON[i // 10], key=b"t0")
        await producer.send_and_wait(topic, POISON[3], key=b"t0")
    finally:
        await producer.stop()
    root, group = tmp_path / "archive", f"archiver-{uuid.uuid4().hex[:6]}"
    assert await KafkaArchiver(kafka_broker.bootstrap, topic, root, group_id=group, batch_size=7).run(
        until_caught_up=True) == 34
    assert read_archive(root, *ALL_DAYS).column("id").to_pylist() == [e.id for e in events]
    unreadable = read_unreadable(root).to_pylist()
    assert [row["value"] for row in unreadable] == POISON
    assert [row["log_offset"] for row in unreadable] == [5, 16, 27, 33]
    assert unreadable[0]["reason"].startswith("JSONDecodeError: ")
    assert "cannot read event type 'request.admitted' schema 99" in unreadable[1]["reason"]
    assert await KafkaArchiver(kafka_broker.bootstrap, topic, root, group_id=group).run(until_caught_up=True) == 0
    assert read_unreadable(root).num_rows == 4
