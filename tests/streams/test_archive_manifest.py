"""Tamper evidence: every file listed with its SHA-256 in a hash-chained manifest; verify names what changed."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from datetime import date, timedelta
from pathlib import Path

import orjson
import pytest
from stream_events import T0, make_event

from ledger.codec import encode
from streams.archive.manifest import GENESIS, Manifest, entry_hash, verify
from streams.archive.read import ArchiveError, archive_files, read_archive, require_archive
from streams.archive.write import ArchiveWriter, Record, archive_from_log
from streams.sqlite_log import SqliteEventLog

ALL_DAYS = (date(2026, 10, 1), date(2026, 10, 9))


def spread_event(i: int):
    return dataclasses.replace(make_event(i, team=f"t{i % 4}"), time=T0 + timedelta(minutes=7 * i))


def write_batches(root: Path, batches: int = 4, size: int = 30) -> list[Path]:
    writer = ArchiveWriter(root, "log")
    paths = []
    for b in range(batches):
        records = [Record(0, n + 1, encode(spread_event(n))) for n in range(b * size, (b + 1) * size)]
        paths += writer.write(records)
    return paths


def manifest_lines(root: Path) -> list[dict]:
    return [orjson.loads(line) for line in (root / "_manifest.jsonl").read_bytes().splitlines()]


def test_every_file_is_listed_with_its_hash_and_the_entries_chain(tmp_path) -> None:
    paths = write_batches(tmp_path)
    entries = manifest_lines(tmp_path)
    assert [e["seq"] for e in entries] == [1, 2, 3, 4]
    assert entries[0]["prev"] == GENESIS
    assert all(b["prev"] == a["hash"] == entry_hash(a) for a, b in zip(entries, entries[1:]))
    listed = {f["path"] for e in entries for f in e["files"]}
    assert listed == {p.relative_to(tmp_path).as_posix() for p in paths}
    assert entries[1]["extents"] == {"0": [31, 60]} and entries[1]["source"] == "log"
    verdict = verify(tmp_path)
    assert verdict.intact and verdict.files == len(paths) and not verdict.notes
    assert verdict.head == entries[-1]["hash"]  # what an auditor records to catch a rewritten manifest


def test_a_flipped_byte_a_deleted_file_and_an_added_file_are_each_named(tmp_path) -> None:
    paths = write_batches(tmp_path)
    changed, deleted = paths[1], paths[-1]
    data = bytearray(changed.read_bytes())
    data[len(data) // 2] ^= 0x01
    changed.write_bytes(bytes(data))
    deleted.unlink()
    added = tmp_path / "date=2026-10-04" / "hour=03" / "part-0-00000000000000000999-00000000000000000999.parquet"
    added.parent.mkdir(parents=True, exist_ok=True)
    added.write_bytes(paths[0].read_bytes())
    verdict = verify(tmp_path)
    assert not verdict.intact and len(verdict.problems) == 3, verdict.problems
    rel = lambda p: p.relative_to(tmp_path).as_posix()  # noqa: E731
    assert any(line.startswith(f"changed: {rel(changed)}") for line in verdict.problems)
    assert any(line.startswith(f"missing: {rel(deleted)}") for line in verdict.problems)
    assert any(line.startswith(f"unlisted: {rel(added)}") for line in verdict.problems)


@pytest.mark.parametrize("how", ["edit", "drop", "garble"])
def test_a_manifest_that_does_not_chain_is_reported(tmp_path, how) -> None:
    write_batches(tmp_path)
    lines = (tmp_path / "_manifest.jsonl").read_bytes().splitlines()
    if how == "edit":  # a listed hash rewritten to match a swapped file, the entry's own hash left alone
        entry = orjson.loads(lines[1])
        entry["files"][0]["sha256"] = "f" * 64
        lines[1] = orjson.dumps(entry, option=orjson.OPT_SORT_KEYS)
    elif how == "drop":
        del lines[1]
    else:
        lines[2] = b"{not json"
    (tmp_path / "_manifest.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    verdict = verify(tmp_path)
    assert not verdict.intact
    assert any("chain broken" in p for p in verdict.problems), verdict.problems
    assert any("manifest entry 2" in p or "manifest entry 3" in p for p in verdict.problems)


def test_a_torn_last_entry_is_dropped_by_the_next_append(tmp_path) -> None:
    write_batches(tmp_path, batches=2)
    with open(tmp_path / "_manifest.jsonl", "ab") as f:
        f.write(b'{"seq": 3, "action": "add", "fi')  # killed while appending
    verdict = verify(tmp_path)
    assert verdict.intact and any("incomplete entry" in n for n in verdict.notes)
    ArchiveWriter(tmp_path, "log").write([Record(0, 500, encode(spread_event(500)))])
    assert [e["seq"] for e in manifest_lines(tmp_path)] == [1, 2, 3]
    assert verify(tmp_path).intact and not verify(tmp_path).notes


async def test_killed_between_files_and_manifest_entry_recovers_listed_and_once(tmp_path, monkeypatch) -> None:
    """Step 2 done, step 3 not: the files are unlisted until the journaled batch is rewritten and listed."""
    log = SqliteEventLog.open(tmp_path / "events.db")
    for i in range(300):
        log.append(spread_event(i))
    await log.flush()
    root = tmp_path / "archive"

    class Crash(BaseException):
        pass

    def crash(self, *args, **kwargs):
        raise Crash

    with monkeypatch.context() as m:
        m.setattr(Manifest, "append", crash)
        with pytest.raises(Crash):
            await archive_from_log(log, root, batch_size=100)
    verdict = verify(root)
    assert verdict.problems and all(p.startswith("unlisted: ") for p in verdict.problems)
    assert await archive_from_log(log, root, batch_size=100) == 300
    assert verify(root).intact
    ids = read_archive(root, *ALL_DAYS).column("id").to_pylist()
    assert len(ids) == len(set(ids)) == 300
    await log.close()


async def test_killed_between_manifest_entry_and_commit_is_not_rewritten(tmp_path) -> None:
    log = SqliteEventLog.open(tmp_path / "events.db")
    for i in range(200):
        log.append(spread_event(i))
    await log.flush()
    root = tmp_path / "archive"

    class Crash(BaseException):
        pass

    def crash() -> None:
        raise Crash

    with pytest.raises(Crash):
        await archive_from_log(log, root, batch_size=120, between_write_and_commit=crash)
    before = {p: p.read_bytes() for p in archive_files(root, *ALL_DAYS)}
    assert verify(root).intact  # listed, only the commit is missing
    assert await archive_from_log(log, root, batch_size=120) == 200
    assert all(p.read_bytes() == data for p, data in before.items())  # the listed batch was not rewritten
    assert len(manifest_lines(root)) == 2 and verify(root).intact
    assert read_archive(root, *ALL_DAYS).num_rows == 200
    await log.close()


def test_an_empty_archive_is_named_as_such(tmp_path) -> None:
    assert verify(tmp_path / "nothing").empty and not verify(tmp_path / "nothing").intact
    with pytest.raises(ArchiveError, match="is empty: nothing has been archived yet"):
        require_archive(tmp_path / "nothing")
    write_batches(tmp_path / "some", batches=1)
    require_archive(tmp_path / "some")


def test_appends_chain_after_entries_longer_than_one_read(tmp_path) -> None:
    """The writer reads only the last entry, backwards from the end: a 400 KB compaction entry included."""
    write_batches(tmp_path, batches=1)
    manifest = Manifest(tmp_path)
    gone = [f"date=2026-10-0{i % 9 + 1}/hour=00/part-{i:060d}.parquet" for i in range(5000)]
    manifest.append("expire", removes=gone)
    with open(tmp_path / "_manifest.jsonl", "ab") as f:
        f.write(b'{"seq": 3, "torn')
    manifest.append("expire", removes=[])
    entries = manifest_lines(tmp_path)
    assert [e["seq"] for e in entries] == [1, 2, 3] and entries[2]["prev"] == entries[1]["hash"]
    assert not manifest.read().chain_problems
    assert manifest.removed_paths() == set(gone) == set(manifest.read().removed)


WRITER = """
import sys
from streams.archive.write import ArchiveWriter, Record
from ledger.codec import encode
from stream_events import make_event
root, source, base = sys.argv[1], sys.argv[2], int(sys.argv[3])
writer = ArchiveWriter(root, source)
for b in range(15):
    writer.write([Record(base, n, encode(make_event(base * 1000 + n))) for n in range(b * 4, b * 4 + 4)])
"""


def test_writers_in_several_processes_share_one_chain(tmp_path) -> None:
    """The manifest lock: two archivers (e.g. two topics) appending at once leave one unbroken chain."""
    here = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here.parents[1]), str(here)])}
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), f"kafka-t{i}", str(i)], env=env)
             for i in (1, 2)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    entries = manifest_lines(tmp_path)
    assert [e["seq"] for e in entries] == list(range(1, 31))
    assert {e["source"] for e in entries} == {"kafka-t1", "kafka-t2"}
    assert verify(tmp_path).intact


def test_the_newest_entry_of_a_source_is_found_from_the_end(tmp_path) -> None:
    manifest = Manifest(tmp_path)
    manifest.append("add", source="a", extents={"0": [1, 5]})
    manifest.append("expire", removes=[f"date=2026-10-01/hour=00/{i:090d}.parquet" for i in range(12_000)])  # >1 MB
    manifest.append("add", source="b", extents={"0": [1, 9]})
    manifest.append("add", source="a", extents={"0": [6, 8]})
    for i in range(50):
        manifest.append("add", source="b", extents={"0": [10 + i, 10 + i]})
    with open(tmp_path / "_manifest.jsonl", "ab") as f:
        f.write(b'{"source":"a","extents":{"0":[9,9]')  # torn: not an entry
    assert manifest.last_entry_of("a")["extents"] == {"0": [6, 8]}
    assert manifest.last_entry_of("b")["extents"] == {"0": [59, 59]}
    assert manifest.last_entry_of("c") is None
    assert Manifest(tmp_path / "none").last_entry_of("a") is None
    writer = ArchiveWriter(tmp_path, "a")
    assert writer.listed(0, 6, 8) and not writer.listed(0, 1, 5)
