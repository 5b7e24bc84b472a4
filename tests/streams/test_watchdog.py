"""streams.watchdog: a table recovery that reads nothing for ``stall_s`` ends the worker."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from types import SimpleNamespace

from streams.watchdog import REWIND, STOP, StallClock, recovery_progress, rewind_targets, watch


def test_a_recovery_that_reads_nothing_is_rewound_once_then_stopped():
    clock = StallClock(rewind_s=3, stall_s=10)
    assert clock.observe(0, True, ("a", 5)) is None
    assert clock.observe(2.9, True, ("a", 5)) is None
    assert clock.observe(3, True, ("a", 5)) == REWIND
    assert clock.observe(4, True, ("a", 5)) is None  # once per quiet stretch
    assert clock.observe(9.9, True, ("a", 5)) is None
    assert clock.observe(10, True, ("a", 5)) == STOP


def test_progress_restarts_the_clock_and_allows_another_rewind():
    clock = StallClock(rewind_s=3, stall_s=10)
    clock.observe(0, True, 1)
    assert clock.observe(3, True, 1) == REWIND
    assert clock.observe(8, True, 2) is None  # read something at 8 (the rewind worked)
    assert clock.observe(11, True, 2) == REWIND
    assert clock.observe(17, True, 2) is None
    assert clock.observe(18, True, 2) == STOP


def test_not_recovering_is_never_a_stall_and_resets_the_clock():
    clock = StallClock(rewind_s=3, stall_s=10)
    clock.observe(0, True, 1)
    clock.observe(3, True, 1)
    assert clock.observe(30, False, 1) is None  # recovery ended (or the group is still agreeing on an assignment)
    assert clock.observe(31, True, 1) is None  # a new recovery starts its own clock
    assert clock.observe(34, True, 1) == REWIND
    assert clock.observe(41, True, 1) == STOP


class _TP(SimpleNamespace):
    def __hash__(self) -> int:
        return hash((self.topic, self.partition))

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]"

    def __lt__(self, other: "_TP") -> bool:
        return (self.topic, self.partition) < (other.topic, other.partition)


def _app(recovery: SimpleNamespace) -> SimpleNamespace:
    consumer = SimpleNamespace(flow_active=True, _active_partitions=set(), _paused_partitions=set(), _read_offset={})
    return SimpleNamespace(tables=SimpleNamespace(recovery=recovery, changelog_queue=asyncio.Queue()),
                           consumer=consumer, consumer_generation_id=3,
                           flow_control=SimpleNamespace(is_active=lambda: True))


def _recovery(offsets: dict, highwaters: dict, in_recovery: bool = True) -> SimpleNamespace:
    def remaining() -> Counter:  # as Faust's: partitions with no offset yet are left out
        return Counter({tp: hw - offsets[tp] for tp, hw in highwaters.items() if offsets[tp] is not None})
    return SimpleNamespace(in_recovery=in_recovery, active_offsets=offsets, active_highwaters=highwaters,
                           active_remaining=remaining)


def test_a_quiet_recovery_is_rewound_to_its_first_unread_offsets_then_the_worker_ends(caplog):
    unread, partly, done = (_TP(topic="w-scope-ledger-changelog", partition=p) for p in (2, 1, 0))
    app = _app(_recovery({unread: -1, partly: 7, done: 40}, {unread: 40, partly: 30, done: 40}))
    seeks: list[dict] = []

    async def seek_wait(targets: dict) -> None:
        seeks.append(targets)  # the stand-in consumer delivers nothing even then: the worker ends

    app.consumer.seek_wait = seek_wait
    stalled: list[bool] = []
    with caplog.at_level(logging.WARNING, logger="farebox.worker"):
        asyncio.run(asyncio.wait_for(watch(app, 0.1, rewind_s=0.03, interval_s=0.01,
                                           on_stall=lambda: stalled.append(True)), 5))
    assert seeks == [{unread: 0, partly: 8}] and stalled == [True]
    rewound, stopped = (r.getMessage() for r in caplog.records)
    assert "seeking the changelog partitions it waits for back to their first unread offsets" in rewound
    assert "w-scope-ledger-changelog[2]: read -1, high-water 40, active False, paused False" in rewound
    assert "the worker stops for its supervisor to start it again (exit 75)" in stopped


def test_rewind_targets_are_the_first_unread_offsets_of_what_recovery_waits_for():
    fresh, read0, behind, done = (_TP(topic="c", partition=p) for p in range(4))
    recovery = _recovery({fresh: -1, read0: 0, behind: 9, done: 5}, {fresh: 3, read0: 3, behind: 12, done: 5})
    assert rewind_targets(recovery) == {fresh: 0, read0: 1, behind: 10}


def test_a_recovery_that_reads_is_left_alone():
    tp = _TP(topic="w-requests-changelog", partition=0)
    offsets = {tp: 0}
    app = _app(_recovery(offsets, {tp: 10_000}))
    stalled: list[bool] = []

    async def reading() -> None:
        watcher = asyncio.ensure_future(watch(app, 0.05, interval_s=0.01, on_stall=lambda: stalled.append(True)))
        for _ in range(30):  # 0.3 s of recovery, reading all along: six stall windows
            offsets[tp] += 1
            await asyncio.sleep(0.01)
        app.tables.recovery.in_recovery = False
        await asyncio.sleep(0.1)
        watcher.cancel()

    asyncio.run(reading())
    assert stalled == []
    assert recovery_progress(app.tables.recovery) == (("w-requests-changelog[0]", 30),)
