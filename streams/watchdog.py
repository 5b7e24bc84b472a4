"""The worker's recovery watchdog: a table recovery that reads nothing is rewound, then the worker ends.

After partitions move, Faust re-reads the newly assigned changelog partitions
into the tables before the agents go on. If that read stops (records drained
from aiokafka's buffer and dropped by Faust's delivery loop, which Faust's
recovery never seeks back for: ``streams.kafka.internals.LivePartitions``
prevents the known way; this module guards against any other), the worker
would fold nothing more while looking alive.

Invariants: when recovery has read nothing for ``rewind_s``, the watchdog logs
what Faust and aiokafka know of each partition recovery waits for and seeks
those partitions back to their first unread offsets, as Faust's recovery does
when it starts (re-reading is harmless: a record at or below the offset read
is skipped). If recovery still reads nothing after ``stall_s``, the worker
ends with ``EXIT_STALLED`` for its supervisor to start it again: a restarted
worker recovers from the changelogs, and nothing of the stalled generation was
acknowledged, so nothing is lost.

``StallClock`` is the decision, pure; ``watch`` is the loop around a Faust app.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

from streams.kafka.internals import partition_report

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
    """What Faust and aiokafka know about each partition recovery still waits for (read-only; best effort)."""
    recovery = app.tables.recovery
    lines = [f"generation {app.consumer_generation_id}, flow active {getattr(app.consumer, 'flow_active', '?')}, "
             f"flow control active {app.flow_control.is_active()}, "
             f"changelog queue {app.tables.changelog_queue.qsize()}"]
    for tp, remaining in sorted(recovery.active_remaining().items()):
        if remaining > 0:
            lines.append(f"{tp.topic}[{tp.partition}]: read {recovery.active_offsets.get(tp)}, "
                         f"high-water {recovery.active_highwaters.get(tp)}, {partition_report(app, tp)}")
    return lines


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
