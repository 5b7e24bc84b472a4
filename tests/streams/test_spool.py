"""The disk spool: acknowledged only once fsynced, read back in order, torn tails cut, truncation ordered."""

from __future__ import annotations

import asyncio

import pytest

from streams.eventlog import EventLogClosed
from streams.spool import Spool, frame


async def test_appends_resolve_in_order_with_positions_and_read_back(tmp_path):
    spool = Spool.open(tmp_path / "s.spool")
    assert spool.empty
    records = [f"record-{i}".encode() * (i % 7 + 1) for i in range(1000)]
    positions = await asyncio.gather(*(spool.append(r) for r in records))
    assert positions == sorted(positions) and positions[-1] == spool.durable_end
    assert [r for _, r in spool.read_all()] == records
    page = spool.read(positions[9], max_bytes=positions[19] - positions[9])
    assert [r for _, r in page] == records[10:20]
    await spool.close()
    with pytest.raises(EventLogClosed):
        spool.append(b"late")
    reopened = Spool.open(tmp_path / "s.spool")
    assert [r for _, r in reopened.read_all()] == records
    await reopened.close()


async def test_a_torn_or_corrupt_tail_is_cut_at_the_last_whole_record(tmp_path):
    path = tmp_path / "s.spool"
    good = frame(b"one") + frame(b"two")
    path.write_bytes(good + frame(b"three")[:-2])  # crash mid-write
    spool = Spool.open(path)
    assert [r for _, r in spool.read_all()] == [b"one", b"two"]
    assert path.stat().st_size == len(good)
    await spool.append(b"four")
    assert [r for _, r in spool.read_all()] == [b"one", b"two", b"four"]
    await spool.close()
    bad = bytearray(path.read_bytes())
    bad[-1] ^= 0xFF  # a flipped byte in the last record: its checksum fails
    path.write_bytes(bytes(bad))
    spool = Spool.open(path)
    assert [r for _, r in spool.read_all()] == [b"one", b"two"]
    await spool.close()


async def test_truncate_runs_in_queue_order(tmp_path):
    spool = Spool.open(tmp_path / "s.spool")
    await asyncio.gather(*(spool.append(b"old") for _ in range(10)))
    cut = spool.truncate()
    after = spool.append(b"new")
    assert await cut == 0
    assert await after == len(frame(b"new")) == spool.durable_end
    assert [r for _, r in spool.read_all()] == [b"new"]
    await spool.close()
