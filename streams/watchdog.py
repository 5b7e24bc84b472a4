"""The worker's recovery watchdog: a table recovery that reads nothing is rewound, then the worker ends.

After partitions move, Faust re-reads the newly assigned changelog partitions
into the tables before the agents go on. In the worker-join test that read
sometimes never started (about 1 run in 10 under load): Faust logged "No
event received for active tp ... since recovery start" every few seconds and
the worker folded nothing more. The report this module logs showed why: for
each such partition aiokafka's position was already at the high-water mark,
while Faust's read offset for it was unset (it had delivered none of them).
The records had been drained from aiokafka's buffer during the rebalance and
dropped by Faust's delivery loop; Faust's recovery seeks only when it starts,
so it waited for them forever. The cause (aiokafka reads an empty set of
partitions as "all of them") is fixed in ``streams.faust_patches.LivePartitions``.

The watchdog stays, for that or any other way a recovery can stop reading:
when recovery has read nothing for ``rewind_s`` it logs that report and seeks
the partitions recovery waits for back to their first unread offsets, as
Faust's recovery did when it started (re-reading is harmless: a record at or
below the offset read is skipped). Before the fix, that cured each stall seen
in the tests within a second. If recovery still reads nothing after
``stall_s``, the worker ends with ``EXIT_STALLED`` for its supervisor to start
it again: a restarted worker recovers from the changelogs
(tests/distributed/test_worker_restart.py), and nothing of the stalled
generation was acknowledged, so nothing is lost.

``StallClock`` is the decision, pure; ``watch`` is the loop around a Faust app.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

log = logging.getLogger("farebox.worker")

EXIT_STALLED = 75  # EX_TEMPFAIL: start it again


REWIND, STOP = "rewind", "stop"


@dataclass
class StallClock:
    """Feeds on (now, recovering, progress); says what to do about a recovery that reads nothing.

    ``progress`` is any value that changes when recovery reads something (the offsets read so far). The
    clock starts when recovery starts or last progressed, and is reset whenever the worker is not
    recovering (waiting for the group to agree on an assignment is not recovery). After ``rewind_s``
    without progress: ``REWIND`` (once per quiet stretch); after ``stall_s``: ``STOP``."""

    rewind_s: float
    stall_s: float
    since: float | None = None
    seen: Hashable = field(default=None)
    rewound: bool = False

    def observe(self, now: float, recovering: bool, progress: Hashable) -> str | None:
        if not recovering:
            self.since, self.seen, self.rewound = None, None, False
            return None
        if self.since is None or progress != self.seen:
            self.since, self.seen, self.rewound = now, progress, False
            return None
        quiet = now - self.since
        if quiet >= self.stall_s:
            return STOP
        if quiet >= self.rewind_s and not self.rewound:
            self.rewound = True
            return REWIND
        return None


def recovery_progress(recovery: Any) -> tuple:
    """The offsets the recovery has read, per changelog partition: changes whenever it reads."""
    return tuple(sorted((str(tp), offset) for tp, offset in recovery.active_offsets.items()))


def recovery_report(app: Any) -> list[str]:
    """What Faust and aiokafka know about each partition recovery still waits for (read-only; best effort:
    these are library internals, read only to explain a stall)."""
    recovery = app.tables.recovery
    consumer = app.consumer
    lines = [f"generation {app.consumer_generation_id}, flow active {getattr(consumer, 'flow_active', '?')}, "
             f"flow control active {app.flow_control.is_active()}, "
             f"changelog queue {app.tables.changelog_queue.qsize()}"]
    try:
        aio = consumer._thread._consumer
        assignment = aio._subscription.subscription.assignment
        fetcher = aio._fetcher
    except AttributeError:
        aio = assignment = fetcher = None
    for tp, remaining in sorted(recovery.active_remaining().items()):
        if remaining <= 0:
            continue
        line = (f"{tp.topic}[{tp.partition}]: read {recovery.active_offsets.get(tp)}, "
                f"high-water {recovery.active_highwaters.get(tp)}, "
                f"active {tp in consumer._active_partitions}, paused {tp in consumer._paused_partitions}, "
                f"read offset {consumer._read_offset.get(tp)}")
        if assignment is not None:
            state = assignment.state_value(_aiotp(tp))
            if state is None:
                line += ", not in aiokafka's assignment"
            else:
                line += (f", aiokafka: paused {state.paused}, position "
                         f"{state.position if state.has_valid_position else None}, "
                         f"awaiting reset {state.awaiting_reset}, high-water {state.highwater}, "
                         f"last fetch {state.timestamp}, buffered {_aiotp(tp) in getattr(fetcher, '_records', {})}")
        lines.append(line)
    return lines


def _aiotp(tp: Any) -> Any:
    from aiokafka.structs import TopicPartition

    return TopicPartition(tp.topic, tp.partition)


def _exit_stalled() -> None:
    logging.shutdown()
    os._exit(EXIT_STALLED)


def rewind_targets(recovery: Any) -> dict[Any, int]:
    """Each changelog partition recovery still waits for -> the first offset it has not read."""
    targets = {}
    for tp, remaining in recovery.active_remaining().items():
        if remaining > 0:
            offset = recovery.active_offsets.get(tp)
            targets[tp] = 0 if offset is None or offset < 0 else offset + 1
    return targets


async def watch(app: Any, stall_s: float, *, rewind_s: float | None = None, interval_s: float = 1.0,
                on_stall: Callable[[], None] = _exit_stalled) -> None:
    """Check the app's recovery every ``interval_s``. Quiet for ``rewind_s`` (default: a third of
    ``stall_s``, at most 2 s: Faust reads our changelogs within milliseconds, and a needless rewind only
    reads again): log the report and seek the partitions recovery waits for back to their first unread
    offset (what Faust's recovery did when it started). Quiet for ``stall_s``: log the report and call
    ``on_stall``."""
    clock = StallClock(rewind_s if rewind_s is not None else min(2.0, stall_s / 3), stall_s)
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(interval_s)
        recovery = app.tables.recovery
        action = clock.observe(loop.time(), bool(recovery.in_recovery), recovery_progress(recovery))
        if action is None:
            continue
        try:
            report = "\n  ".join(recovery_report(app))
        except Exception as exc:  # the report explains; it never keeps the worker alive
            report = f"(no report: {exc!r})"
        if action == REWIND:
            targets = rewind_targets(recovery)
            log.warning("table recovery has read nothing for %.0f s; seeking the changelog partitions it waits "
                        "for back to their first unread offsets %s:\n  %s", clock.rewind_s,
                        {str(tp): offset for tp, offset in targets.items()}, report)
            try:
                await app.consumer.seek_wait(targets)
            except Exception:  # a rebalance meanwhile: the next recovery seeks for itself
                log.warning("rewinding the recovery failed", exc_info=True)
            continue
        log.critical("table recovery has read nothing for %.0f s; the worker stops for its supervisor to "
                     "start it again (exit %d):\n  %s", stall_s, EXIT_STALLED, report)
        on_stall()
        return
