"""Compaction and retention: new files plus manifest entries, never an edit; crash-safe; a changed file refused."""

from __future__ import annotations

import dataclasses
import json
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import orjson
import pytest
from stream_events import T0, make_event

from ledger.codec import encode
from streams.archive import compact as archive_compact
from streams.archive.compact import compact, compact_hours, expire
from streams.archive.manifest import Manifest, verify
from streams.archive.read import ArchiveError, archive_files, read_archive
from streams.archive.write import ArchiveWriter, Record

ALL_DAYS = (date(2026, 10, 1), date(2026, 10, 9))
DAY1, DAY2, DAY3 = date(2026, 10, 3), date(2026, 10, 4), date(2026, 10, 5)


def spread_event(i: int):
    """Events 7 minutes apart: 600 cover 2026-10-03 10:00 to 2026-10-06."""
    return dataclasses.replace(make_event(i, team=f"t{i % 4}"), time=T0 + timedelta(minutes=7 * i))


def archived(root: Path, first: int, last: int, batch: int = 50) -> None:
    writer = ArchiveWriter(root, "log")
    for start in range(first, last, batch):
        writer.write([Record(0, n + 1, encode(spread_event(n))) for n in range(start, min(start + batch, last))])


def files_on_disk(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*.parquet")}


def ids(root: Path) -> list[str]:
    return read_archive(root, *ALL_DAYS).column("id").to_pylist()


def test_closed_days_become_one_daily_file_each_and_reads_do_not_change(tmp_path) -> None:
    archived(tmp_path, 0, 600)
    before = ids(tmp_path)
    hourly_day1 = [p for p in archive_files(tmp_path, DAY1, DAY1)]
    assert len(hourly_day1) > 10
    done = compact(tmp_path, before=DAY3)
    assert done.compacted_days == [DAY1, DAY2] and len(done.written) == 2
    for day in (DAY1, DAY2):
        [daily] = archive_files(tmp_path, day, day)
        assert daily.name.startswith("day-") and daily.parent.name == f"date={day}"
    assert all(not p.exists() for p in hourly_day1)  # replaced files deleted once recorded
    assert len(archive_files(tmp_path, DAY3, DAY3)) > 1  # not before the cut-off: untouched
    assert ids(tmp_path) == before
    entry = orjson.loads((tmp_path / "_manifest.jsonl").read_bytes().splitlines()[-1])
    assert entry["action"] == "compact" and len(entry["files"]) == 1 and entry["removes"]
    assert verify(tmp_path).intact
    assert compact(tmp_path, before=DAY3).compacted_days == []  # idempotent


def test_late_events_for_a_compacted_day_are_merged_into_a_new_daily_file(tmp_path) -> None:
    archived(tmp_path, 0, 200)
    compact(tmp_path, before=DAY3)
    [old] = archive_files(tmp_path, DAY1, DAY1)
    late = dataclasses.replace(make_event(9001, team="t1"), time=T0 + timedelta(hours=3))
    ArchiveWriter(tmp_path, "log").write([Record(0, 9001, encode(late))])
    ArchiveWriter(tmp_path, "kafka-x").write([Record(2, 5, encode(spread_event(3)))])  # a duplicate id elsewhere
    assert len(archive_files(tmp_path, DAY1, DAY1)) == 3
    compact(tmp_path, before=DAY3)
    [new] = archive_files(tmp_path, DAY1, DAY1)
    assert new != old and not old.exists()
    day = read_archive(tmp_path, DAY1, DAY1).column("id").to_pylist()
    assert late.id in day and len(day) == len(set(day))
    assert verify(tmp_path).intact


def test_killed_before_the_manifest_entry_the_orphan_output_is_dropped(tmp_path, monkeypatch) -> None:
    archived(tmp_path, 0, 300)
    before, disk = ids(tmp_path), files_on_disk(tmp_path)

    class Crash(BaseException):
        pass

    def crash(*args, **kwargs):
        raise Crash

    with monkeypatch.context() as m:
        m.setattr(Manifest, "append_locked", crash)
        with pytest.raises(Crash):
            compact(tmp_path, before=DAY3)
    orphan = files_on_disk(tmp_path) - disk
    assert len(orphan) == 1 and [p for p in verify(tmp_path).problems] == [f"unlisted: {orphan.pop()} (in no "
                                                                             f"manifest entry)"]
    assert ids(tmp_path) == before  # the old files are still live
    done = compact(tmp_path, before=DAY3)
    assert done.leftovers_deleted == 1 and done.compacted_days == [DAY1, DAY2]
    assert verify(tmp_path).intact and ids(tmp_path) == before


def test_killed_after_the_manifest_entry_the_replaced_files_are_skipped_then_deleted(tmp_path, monkeypatch) -> None:
    archived(tmp_path, 0, 300)
    before = ids(tmp_path)

    class Crash(BaseException):
        pass

    def crash(paths):
        if paths:  # the replaced or expired files (finish's leftovers are none here)
            raise Crash

    with monkeypatch.context() as m:
        m.setattr(archive_compact, "_delete", crash)  # killed before the deletes: the journal stays
        with pytest.raises(Crash):
            compact(tmp_path, before=DAY2)
    leftovers = [p for p in (tmp_path / f"date={DAY1}").rglob("part-*.parquet")]
    assert leftovers and (tmp_path / archive_compact.JOURNAL).exists()
    assert [p.name[:4] for p in archive_files(tmp_path, DAY1, DAY1)] == ["day-"]  # readers skip the replaced
    assert ids(tmp_path) == before
    verdict = verify(tmp_path)
    assert verdict.intact and len(verdict.notes) == len(leftovers)
    assert all(n.startswith("superseded: ") for n in verdict.notes)
    assert compact(tmp_path, before=DAY2).leftovers_deleted == len(leftovers)
    assert not any(p.exists() for p in leftovers) and not verify(tmp_path).notes
    assert not (tmp_path / archive_compact.JOURNAL).exists()


def test_retention_killed_before_its_deletes_is_finished_and_never_read(tmp_path, monkeypatch) -> None:
    archived(tmp_path, 0, 600)

    class Crash(BaseException):
        pass

    def crash(paths):
        if paths:  # the replaced or expired files (finish's leftovers are none here)
            raise Crash

    with monkeypatch.context() as m:
        m.setattr(archive_compact, "_delete", crash)
        with pytest.raises(Crash):
            expire(tmp_path, before=DAY2)
    assert list((tmp_path / f"date={DAY1}").rglob("*.parquet"))  # still on disk...
    assert archive_files(tmp_path, DAY1, DAY1) == []  # ...but expired for every reader
    assert expire(tmp_path, before=DAY2).leftovers_deleted > 0
    assert not (tmp_path / f"date={DAY1}").exists() and verify(tmp_path).intact


def test_a_changed_file_is_never_compacted(tmp_path) -> None:
    archived(tmp_path, 0, 200)
    victim = archive_files(tmp_path, DAY1, DAY1)[2]
    data = bytearray(victim.read_bytes())
    data[100] ^= 0xFF
    victim.write_bytes(bytes(data))
    disk = files_on_disk(tmp_path)
    manifest = (tmp_path / "_manifest.jsonl").read_bytes()
    with pytest.raises(ArchiveError, match="changed since manifest entry") as info:
        compact(tmp_path, before=DAY3)
    assert str(victim) in str(info.value)
    assert files_on_disk(tmp_path) == disk and (tmp_path / "_manifest.jsonl").read_bytes() == manifest


def test_a_broken_chain_stops_compaction(tmp_path) -> None:
    archived(tmp_path, 0, 200)
    lines = (tmp_path / "_manifest.jsonl").read_bytes().splitlines()
    (tmp_path / "_manifest.jsonl").write_bytes(b"\n".join(lines[1:]) + b"\n")
    with pytest.raises(ArchiveError, match="does not chain"):
        compact(tmp_path, before=DAY3)


def test_retention_drops_old_days_and_records_it(tmp_path) -> None:
    archived(tmp_path, 0, 600)
    compact(tmp_path, before=DAY2)
    done = expire(tmp_path, before=DAY3)
    assert done.expired > 1
    assert archive_files(tmp_path, DAY1, DAY2) == [] and not (tmp_path / f"date={DAY1}").exists()
    assert {e.date() for e in read_archive(tmp_path, *ALL_DAYS).column("event_time").to_pylist()} >= {DAY3}
    entry = json.loads((tmp_path / "_manifest.jsonl").read_text().splitlines()[-1])
    assert entry["action"] == "expire" and entry["before"] == str(DAY3) and not entry["files"]
    assert verify(tmp_path).intact
    assert expire(tmp_path, before=DAY3).expired == 0


def test_closed_hours_of_an_open_day_are_merged_one_file_each(tmp_path) -> None:
    archived(tmp_path, 0, 300, batch=3)  # ~3 batch files per hour
    before = ids(tmp_path)
    cut = datetime(2026, 10, 4, 5, 0, tzinfo=timezone.utc)  # 2026-10-04 is open, its hours 00-04 are closed
    done = compact_hours(tmp_path, before=cut)
    assert done.compacted_hours == 14 + 5 and done.replaced > 2 * done.compacted_hours
    for folder in sorted((tmp_path / f"date={DAY2}").glob("hour=*")):
        names = [p.name for p in folder.glob("*.parquet")]
        if folder.name < "hour=05":
            assert len(names) == 1 and names[0].startswith("hour-"), folder
        else:
            assert all(n.startswith("part-") for n in names) and len(names) > 1, folder
    assert ids(tmp_path) == before and verify(tmp_path).intact
    assert compact_hours(tmp_path, before=cut).compacted_hours == 0
    compact(tmp_path, before=DAY2)  # the day closes: its hour files become one day file
    assert [p.name[:4] for p in archive_files(tmp_path, DAY1, DAY1)] == ["day-"]
    assert ids(tmp_path) == before and verify(tmp_path).intact


def test_a_reader_racing_a_compaction_lists_again(tmp_path, monkeypatch) -> None:
    from streams.archive import read as archive_read

    archived(tmp_path, 0, 300)
    before = ids(tmp_path)
    stale = archive_files(tmp_path, *ALL_DAYS)
    compact(tmp_path, before=DAY3)  # deletes files the stale listing names
    calls = []

    def listing(root, start, end):
        calls.append(1)
        return stale if len(calls) == 1 else archive_files(root, start, end)

    monkeypatch.setattr(archive_read, "archive_files", listing)
    assert archive_read.read_archive(tmp_path, *ALL_DAYS).column("id").to_pylist() == before
    assert len(calls) == 2


def test_the_documented_duckdb_glob_reads_the_same_events_in_every_layout(tmp_path) -> None:
    """The finance contract (streams/archive/__init__.py): the glob, no hive columns, dedupe by id."""
    import duckdb

    archived(tmp_path, 0, 600, batch=7)
    compact(tmp_path, before=DAY2)  # a day file
    compact_hours(tmp_path, before=datetime(2026, 10, 4, 6, tzinfo=timezone.utc))  # hour files
    ArchiveWriter(tmp_path, "kafka-x").write([Record(1, 3, encode(spread_event(5)))])  # a duplicate id
    query = (f"SELECT count(*), count(DISTINCT id), sum(amount_micro) FROM "
             f"read_parquet('{tmp_path}/date=*/**/*.parquet', hive_partitioning = false)")
    [(rows, distinct, _)] = duckdb.sql(query).fetchall()
    table = read_archive(tmp_path, *ALL_DAYS)
    assert rows == table.num_rows + 1 and distinct == table.num_rows == 600
    assert list(tmp_path.glob("date=*/day-*.parquet")) and list(tmp_path.glob("date=*/hour=*/hour-*.parquet"))
    assert list(tmp_path.glob("date=*/hour=*/part-*.parquet"))  # all three kinds side by side
