"""Checkpoints and rebuild against the real SqliteEventLog."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from checkpoint_events import IST, T0, request_events

from ledger.balances import Ledger
from streams.checkpoints import Checkpointer, CheckpointStore, rebuild
from streams.sqlite_log import SqliteEventLog

HERE = Path(__file__).parent


async def fill(log: SqliteEventLog, requests: range) -> None:
    for i in requests:
        for event in request_events(i):
            log.append(event)
    await log.flush()


def full_fold(events) -> Ledger:
    ledger = Ledger(IST)
    for _, event in events:
        ledger.apply(event)
    return ledger


async def test_rebuild_from_a_checkpoint_equals_a_full_fold(tmp_path):
    log = SqliteEventLog.open(tmp_path / "events.db")
    store = CheckpointStore(tmp_path / "checkpoints.db")
    try:
        await fill(log, range(200))
        empty, offset = await rebuild(log, store, IST, page=37)
        assert offset == log.last_offset == 600
        expected = full_fold(await log.read(0, 10_000))
        assert empty.to_bytes() == expected.to_bytes()

        middle = full_fold(await log.read(0, 301))  # a checkpoint mid-request (some holds open)
        assert middle.open_holds()
        await store.save(301, middle.to_bytes())
        await fill(log, range(200, 250))
        rebuilt, offset = await rebuild(log, store, IST, page=50)
        assert offset == 750
        assert rebuilt.to_bytes() == full_fold(await log.read(0, 10_000)).to_bytes()
    finally:
        store.close()
        await log.close()


async def test_store_keeps_the_last_three(tmp_path):
    store = CheckpointStore(tmp_path / "checkpoints.db")
    try:
        assert await store.latest() is None
        for offset in (10, 20, 30, 40, 50):
            await store.save(offset, f"blob-{offset}".encode())
        assert await store.latest() == (50, b"blob-50")
        assert [offset for offset, _ in await store.history()] == [50, 40, 30]
    finally:
        store.close()
    reopened = CheckpointStore(tmp_path / "checkpoints.db")
    assert await reopened.latest() == (50, b"blob-50")
    reopened.close()


async def test_unusable_checkpoints_are_skipped(tmp_path):
    log = SqliteEventLog.open(tmp_path / "events.db")
    store = CheckpointStore(tmp_path / "checkpoints.db")
    try:
        await fill(log, range(20))
        good = full_fold(await log.read(0, 30))
        await store.save(30, good.to_bytes())
        await store.save(45, b"corrupt")
        await store.save(10_000, good.to_bytes())  # ahead of this log: made from another file
        expected = full_fold(await log.read(0, 10_000)).to_bytes()
        rebuilt, offset = await rebuild(log, store, IST)
        assert (rebuilt.to_bytes(), offset) == (expected, 60)
        # a checkpoint made in another zone is not used: periods would differ
        utc_ledger, _ = await rebuild(log, store, ZoneInfo("UTC"))
        assert utc_ledger.tz.key == "UTC"
        assert utc_ledger.to_bytes() != expected
    finally:
        store.close()
        await log.close()


async def test_checkpointer_saves_every_k_events_or_t_seconds(tmp_path):
    store = CheckpointStore(tmp_path / "checkpoints.db")
    clock = [0.0]
    checkpointer = Checkpointer(store, every_events=100, every_seconds=60, clock=lambda: clock[0])
    ledger = Ledger(IST)
    try:
        assert not await checkpointer.observe(99, ledger)
        assert await checkpointer.observe(100, ledger)
        assert not await checkpointer.observe(150, ledger)
        clock[0] = 61.0
        assert await checkpointer.observe(151, ledger)
        assert not await checkpointer.observe(151, ledger)  # nothing new
        assert [offset for offset, _ in await store.history()] == [151, 100]
    finally:
        store.close()


def _start_writer(directory: Path) -> subprocess.Popen[str]:
    root = HERE.parents[1]
    return subprocess.Popen(
        [sys.executable, str(HERE / "checkpoint_writer.py"), str(directory)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=root,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(HERE)])},
    )


@pytest.mark.parametrize(("saves", "then_s"), [(1, 0.0), (3, 0.013), (5, 0.05)])
async def test_a_crash_between_fold_and_checkpoint_loses_nothing(tmp_path, saves, then_s):
    """SIGKILL a process that appends, folds what it reads back and checkpoints; rebuild still matches."""
    proc = _start_writer(tmp_path)
    assert proc.stdout is not None
    seen = 0
    for line in proc.stdout:
        seen += line.startswith("saved")
        if seen >= saves:
            break
    await asyncio.sleep(then_s)
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=10)
    assert seen >= saves, err

    log = SqliteEventLog.open(tmp_path / "events.db")
    store = CheckpointStore(tmp_path / "checkpoints.db")
    try:
        latest = await store.latest()
        assert latest is not None and latest[0] <= log.last_offset
        rebuilt, offset = await rebuild(log, store, IST)
        assert offset == log.last_offset
        assert rebuilt.to_bytes() == full_fold(await log.read(0, 10**7)).to_bytes()
    finally:
        store.close()
        await log.close()


def test_expiry_times_survive_checkpoints():
    ledger = Ledger(IST)
    for event in request_events(1)[:1]:
        ledger.apply(event)
    copy = Ledger.from_bytes(ledger.to_bytes())
    assert copy.expired_holds(T0 + timedelta(days=1)) == ledger.expired_holds(T0 + timedelta(days=1))
