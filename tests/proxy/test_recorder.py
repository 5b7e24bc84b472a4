"""The recorder: append first, then fold only what the log accepted (events -> projection, one way)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import pytest

from ledger.events import ConfigPublished
from proxy.metering.recorder import Recorder
from proxy.observe.metrics import Metrics
from tests.proxy.fakes import MemoryLog

EVENT = ConfigPublished(version=3, content_hash="abc", time=datetime(2026, 11, 18, tzinfo=timezone.utc))


async def test_the_fold_sees_an_event_only_after_the_log_took_it() -> None:
    log, folded, durable = MemoryLog(), [], []

    def fold(event):  # type: ignore[no-untyped-def]
        folded.append((event, list(log.events)))  # what the log held when the fold ran

    recorder = Recorder(log, Metrics(), fold=fold, on_durable=lambda offset, e: durable.append(offset))
    assert recorder.emit(EVENT)
    assert folded == [(EVENT, [EVENT])]
    await asyncio.sleep(0)  # acknowledgements arrive as callbacks
    assert durable == [1]


async def test_a_refused_append_is_counted_and_never_folded() -> None:
    log, folded = MemoryLog(), []
    recorder = Recorder(log, Metrics(), fold=folded.append)
    log.refuse = True
    assert not recorder.emit(EVENT)
    assert folded == [] and recorder.failures == 1
    assert b"farebox_event_append_failures_total 1.0" in recorder.metrics.render()


async def test_a_failed_append_is_counted_and_not_acknowledged() -> None:
    durable: list[int] = []

    class FailingLog:
        def append(self, event):  # type: ignore[no-untyped-def]
            fut = asyncio.get_running_loop().create_future()
            fut.set_exception(OSError("disk full"))
            return fut

    recorder = Recorder(FailingLog(), Metrics(), on_durable=lambda offset, e: durable.append(offset))
    assert recorder.emit(EVENT)  # accepted: the failure comes later, from the writer
    await asyncio.sleep(0)
    assert recorder.failures == 1 and durable == []


async def test_record_folds_and_waits_until_durable_and_raises_a_refusal() -> None:
    log, folded, durable = MemoryLog(), [], []
    recorder = Recorder(log, Metrics(), fold=folded.append, on_durable=lambda offset, e: durable.append(offset))
    assert await recorder.record(EVENT) == 1  # the offset the log acknowledged
    await asyncio.sleep(0)  # acknowledgements arrive as callbacks
    assert folded == [EVENT] and durable == [1]
    log.refuse = True
    with pytest.raises(RuntimeError, match="closed"):  # what the log raises reaches the caller
        await recorder.record(EVENT)
    assert folded == [EVENT] and recorder.failures == 1
