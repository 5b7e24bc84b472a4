"""The embedded runner: the checkpointed ledger is fed by the log's acknowledgements, no read-back."""

from __future__ import annotations

import asyncio
from pathlib import Path

from checkpoint_events import IST, request_events

from streams.checkpoints import CheckpointStore, rebuild
from streams.runner import EmbeddedLedgerRunner
from streams.sqlite_log import SqliteEventLog


async def test_acknowledged_events_keep_the_follower_equal_to_the_live_ledger(tmp_path: Path) -> None:
    log = SqliteEventLog.open(tmp_path / "events.sqlite")
    store = CheckpointStore(tmp_path / "checkpoints.sqlite")
    runner = EmbeddedLedgerRunner(log, store, IST, every_events=50)
    live = await runner.start()
    futures = []
    for i in range(120):
        for event in request_events(i):
            live.apply(event)
            fut = log.append(event)
            fut.add_done_callback(lambda f, e=event: runner.acknowledged(f.result(), e))
            futures.append(fut)
        if i == 60:  # a duplicate append is acknowledged with its old offset and folded once
            dup = log.append(request_events(3)[0])
            dup.add_done_callback(lambda f, e=request_events(3)[0]: runner.acknowledged(f.result(), e))
            futures.append(dup)
    await asyncio.gather(*futures)
    assert runner.offset == log.last_offset == 360
    assert runner.caught_up_equal(live)
    assert await runner.catch_up() == 0  # nothing left to read back
    await runner.final_checkpoint()
    rebuilt, offset = await rebuild(log, store, IST)
    assert offset == 360 and rebuilt.to_bytes() == live.to_bytes()
    await log.close()
    store.close()


async def test_an_event_another_process_appended_is_folded_not_skipped(tmp_path: Path) -> None:
    """``farebox rerate --apply`` appends to the log of a running server: both ledgers must fold it."""
    log = SqliteEventLog.open(tmp_path / "events.sqlite")
    store = CheckpointStore(tmp_path / "checkpoints.sqlite")
    runner = EmbeddedLedgerRunner(log, store, IST, every_events=50)
    live = await runner.start()

    async def record(events) -> None:  # noqa: ANN001
        futures = []
        for event in events:
            live.apply(event)
            fut = log.append(event)
            fut.add_done_callback(lambda f, e=event: runner.acknowledged(f.result(), e))
            futures.append(fut)
        await asyncio.gather(*futures)

    await record(request_events(0))
    other = SqliteEventLog.open(tmp_path / "events.sqlite")  # a second writer, as the CLI is
    foreign = request_events(1)
    await asyncio.gather(*[other.append(e) for e in foreign])
    await other.close()
    await record(request_events(2))
    assert runner.offset == 3  # the acks past the hole wait for catch_up
    again: list = []  # what catch_up applies to the live ledger: the foreign events only, never ours twice
    fold = live.apply
    live.apply = lambda e: again.append(e) or fold(e)  # type: ignore[method-assign]
    assert await runner.catch_up() == 6
    assert again == list(foreign)
    assert runner.caught_up_equal(live)  # the live (admission) ledger folded the foreign events too
    assert all(not fold(e) for e in foreign)
    await log.close()
    store.close()
