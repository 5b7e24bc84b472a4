"""A decode pool only makes a batch faster: with one, the writer writes the same files, byte for byte, and
refuses the same records for the same reasons as without; a pool process that dies loses nothing."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ledger.codec import encode, to_dict
from streams.archive.pool import DecodePool, _slices
from streams.archive.schema import CHUNK
from streams.archive.write import ArchiveWriter, Record
from tests.bench.finance.measure import real_events
from tests.ledger.wire_mutations import mutated
from tests.streams.test_archive_batch import NOT_EVENTS, NOW, definition


@pytest.fixture(scope="module")
def pool():
    with DecodePool(2) as started:
        started.start()
        yield started


def poisoned(events) -> list[Record]:
    """``events`` encoded over two partitions, with wrong records, non-events and a 64-bit overflow among them,
    in several slices of the pool."""
    values = [encode(e) for e in events]
    for n, (field, how, value) in enumerate([("cost_micro", "set", -1), ("team", "set", True), ("usage", "drop", None),
                                             ("time", "set", 5), ("holds", "nested", -5), ("schema", "set", 99)]):
        at = next(i for i in range(11 + 401 * n, len(events)) if field in to_dict(events[i]))
        values[at] = json.dumps(mutated(to_dict(events[at]), how, field, value)).encode()
    wire = to_dict(events[1500])
    wire["cost_micro"] = 2**64  # reads as an event, too wide for the archive
    values[1500] = json.dumps(wire).encode()
    values[CHUNK * 2 - 2: CHUNK * 2 - 2] = NOT_EVENTS  # across a chunk boundary, which may be a slice boundary
    return [Record(n % 2, 5_000 + n, v) for n, v in enumerate(values)]


def archive_of(root: Path, records: list[Record], trusted: bool, pool: DecodePool | None) -> tuple[dict, list, list]:
    writer = ArchiveWriter(root, "test", pool)
    paths = writer.write(records, now=NOW, trusted=trusted, decoded=writer.decode(records, trusted=trusted))
    files = {p.relative_to(root).as_posix(): p.read_bytes() for p in paths if "_unreadable" not in p.parts}
    refused = sorted((r["log_partition"], r["log_offset"], r["reason"], r["value"])
                     for p in paths if "_unreadable" in p.parts for r in pq.read_table(p).to_pylist())
    return files, refused, writer.manifest.read().entries  # ``at`` is NOW: the same chain, hashes and all


@pytest.mark.parametrize("trusted", [False, True])
def test_with_a_pool_the_same_files_refusals_and_manifest_entries(pool, tmp_path, trusted):
    events = real_events(3 * CHUNK)  # about 9 chunks, several hours
    records = poisoned(events) if not trusted else [Record(n % 2, 5_000 + n, encode(e)) for n, e in enumerate(events)]
    alone = archive_of(tmp_path / "alone", records, trusted, None)
    pooled = archive_of(tmp_path / "pooled", records, trusted, pool)
    assert pooled == alone
    files, refused = definition(records, trusted)
    assert alone[0] == files and alone[1] == refused
    if not trusted:
        assert len(refused) == len(NOT_EVENTS) + 7  # six made wrong, one too wide


def test_a_pool_process_killed_mid_batch_loses_nothing_and_the_pool_renews(tmp_path):
    records = [Record(0, n, encode(e)) for n, e in enumerate(real_events(2 * CHUNK))]
    expected = archive_of(tmp_path / "alone", records, False, None)
    with DecodePool(2) as pool:
        pool.start()
        writer = ArchiveWriter(tmp_path / "killed", "test", pool)
        decoded = writer.decode(records)
        os.kill(next(iter(pool._executor._processes)), signal.SIGKILL)  # while it decodes its slice
        paths = writer.write(records, now=NOW, decoded=decoded)  # the lost slices decoded in the archiver
        assert {p.relative_to(writer.root).as_posix(): p.read_bytes() for p in paths} == expected[0]
        assert writer.manifest.read().entries == expected[2]
        assert archive_of(tmp_path / "renewed", records, False, pool) == expected  # a new pool decodes again
        assert not getattr(pool._executor, "_broken", False)


def test_slices_are_whole_chunks_and_cover_every_record():
    for n in (2 * CHUNK, 2 * CHUNK + 1, 5_000, 10 * CHUNK):
        for parts in (1, 2, 3, 8):
            got = _slices(n, parts)
            assert got[0][0] == 0 and got[-1][1] == n and len(got) <= parts
            assert all(a == b for (_, a), (b, _) in zip(got, got[1:]))
            assert all((stop - start) % CHUNK == 0 for start, stop in got[:-1])
