"""The archive always runs: in passes beside the embedded gateway, or as ``farebox archiver``'s housekeeping.

Embedded: ``EmbeddedArchiver`` copies the SQLite event log into the Parquet
archive every ``flush_interval_s`` or as soon as ``flush_events`` are
pending, and once more at shutdown after the log closed (so every accepted
event is archived). Each pass runs in a spawned child process (one, kept for
the archiver's life, niced so the gateway's requests win a contended CPU)
with its own read-only connection to the log file, under the root's
log-archiver lock: its CPU (decoding, Parquet encoding) neither holds the
gateway's GIL nor stalls its event loop, which only awaits the child's answer
from a worker thread. A pass with a backlog (more than ``flush_events``
pending: after a stop, or a burst) is decoded by ``decode_processes``
processes the child starts then and keeps. After a pass it merges each closed
hour's batch files into one (``Housekeeper``) and, from ``compact_hour_utc``
on, once a day compacts the days before today and applies retention, then
hands the archive to ``derive`` (the finance side's per-request table: the
composition root passes ``reconcile.request_table_write.refresh_request_table``;
this package never imports ``reconcile``). Its lag is on ``/metrics``:
``farebox_archive_lag_events`` (log offset minus archived offset) and
``farebox_archive_lag_seconds`` (0 when caught up, else the time since the
archive last held everything the log held: an upper bound on the age of the
oldest unarchived event).

Distributed: ``farebox archiver`` (``farebox.archiver``) runs ``KafkaArchiver`` on the requests topic
and the same ``Housekeeper`` beside it.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, AsyncIterator, Callable, Optional

from prometheus_client import CollectorRegistry, Gauge

from streams.archive.config import ArchiveSettings
from streams.archive.manifest import Manifest, archived_offset, file_lock
from streams.orphans import leave_with

if TYPE_CHECKING:
    from streams.archive.batch import Decoder
    from streams.archive.compact import Housekeeping
    from streams.archive.pool import DecodePool

# The Parquet writer, compaction and the warehouse (pyarrow, DuckDB) are imported where a pass or housekeeping
# runs: in the archiver's child process, or in ``farebox archiver``. The gateway that schedules the passes never
# loads them (a second of CPU at every pod start).

log = logging.getLogger("farebox.archive")


HOUR_GRACE = timedelta(minutes=10)  # an hour's files are merged this long after it ends (late batches)


# The finance side's step after housekeeping (root, now, whether files changed): picklable, it goes to the child.
Derive = Callable[[Path, datetime, bool], None]


def housekeep(root: Path, cfg: ArchiveSettings, now: datetime, derive: Optional[Derive] = None) -> Housekeeping:
    """Retention first (nothing is compacted only to be dropped), then compaction of the closed days, then
    ``derive`` over the files that remain (told whether any changed)."""
    from streams.archive.compact import Housekeeping, compact, expire

    done = Housekeeping()
    if cfg.retention_days is not None:
        dropped = expire(root, before=now.date() - timedelta(days=cfg.retention_days), now=now)
        done.expired, done.leftovers_deleted = dropped.expired, dropped.leftovers_deleted
    if cfg.compact:
        merged = compact(root, before=now.date(), now=now)
        done.compacted_days, done.written, done.replaced = merged.compacted_days, merged.written, merged.replaced
        done.leftovers_deleted += merged.leftovers_deleted
    if derive is not None:
        derive(root, now, bool(done.compacted_days or done.expired))
    return done


class Housekeeper:
    """When to compact and expire: each closed hour's files once the hour is ``HOUR_GRACE`` old, and the
    daily ``housekeep`` once a UTC day from ``compact_hour_utc`` on. ``run`` blocks: call it in a thread."""

    def __init__(self, root: Path, cfg: ArchiveSettings, derive: Derive | None = None) -> None:
        self.root, self.cfg, self.derive = root, cfg, derive
        self.daily_on: date | None = None
        self.hours_before: datetime | None = None

    def _hours_mark(self, now: datetime) -> datetime:
        return (now - HOUR_GRACE).replace(minute=0, second=0, microsecond=0)

    def _hours_due(self, now: datetime) -> bool:
        return self.cfg.compact and self._hours_mark(now) != self.hours_before

    def _daily_due(self, now: datetime) -> bool:
        wanted = self.cfg.compact or self.cfg.retention_days is not None
        return wanted and now.hour >= self.cfg.compact_hour_utc and self.daily_on != now.date()

    def due(self, now: datetime) -> bool:
        return self._hours_due(now) or self._daily_due(now)

    def run(self, now: datetime) -> None:
        """What is due at ``now``; a changed or unreadable file is refused and logged (archiving goes on)."""
        from streams.archive.compact import compact_hours
        from streams.archive.read import ArchiveError

        try:
            if self._hours_due(now):
                self.hours_before = self._hours_mark(now)
                hours = compact_hours(self.root, before=self.hours_before, now=now)
                if hours.compacted_hours:
                    log.info("archive: merged %d closed hour(s) (%d files replaced)", hours.compacted_hours,
                             hours.replaced)
            if self._daily_due(now):
                self.daily_on = now.date()
                done = housekeep(self.root, self.cfg, now, self.derive)
                if done.compacted_days or done.expired:
                    log.info("archive: compacted %d day(s) (%d files replaced), expired %d file(s)",
                             len(done.compacted_days), done.replaced, done.expired)
        except ArchiveError as exc:
            log.error("archive housekeeping refused: %s", exc)


def archive_log_once(log_path: Path, root: Path, batch_size: int, pool: Decoder | None = None) -> int:
    """One pass (blocking; run it in a thread): archive what the log holds beyond the archived offset."""
    from streams.archive.write import archive_from_log
    from streams.sqlite_log import SqliteEventLog

    async def run() -> int:
        events = SqliteEventLog.open(log_path, readonly=True)
        try:
            with file_lock(root / "_state" / "log.lock"):  # one log archiver per root (serve, replay --archive-first)
                return await archive_from_log(events, root, batch_size=batch_size, pool=pool)
        finally:
            await events.close()

    return asyncio.run(run())


_child_pool: DecodePool | None = None  # in the archiver's child: its decode pool, started at the first backlog


def _backlog_pool(decoders: int) -> DecodePool | None:
    """The child's decode pool: started now if ``decoders`` asks for one and none runs yet."""
    global _child_pool
    if decoders and _child_pool is None:
        from streams.archive.pool import DecodePool

        _child_pool = DecodePool(decoders)
    return _child_pool


def close_child_pool() -> None:
    """In the archiver's child, before it stops: stop its decode pool, if it started one."""
    global _child_pool
    if _child_pool is not None:
        _child_pool.close()
        _child_pool = None


def archive_pass(log_path: Path, root: Path, batch_size: int, keeper: Housekeeper,
                 backlog_decoders: int = 0) -> tuple[int, Housekeeper]:
    """One pass, then the housekeeping due after it (run in the archiver's child process): events archived, and
    the housekeeper with what it did recorded (the parent keeps it for the next pass). ``backlog_decoders``:
    the pass has a backlog (more than a batch pending) for a decode pool of that many processes (0: none);
    a pool once started is kept for the child's life and decodes every later pass too."""
    archived = archive_log_once(log_path, root, batch_size, _backlog_pool(backlog_decoders))
    now = datetime.now(timezone.utc)
    if keeper.due(now):
        keeper.run(now)
    return archived, keeper


ARCHIVER_NICE = 10  # the embedded archiver's child (and its decode pool) yield the CPU to the gateway's requests


def _archiver_child(parent_pid: int) -> None:
    """The child's initializer. It leaves with its parent, and it ignores the SIGINT and SIGTERM sent to
    its whole process group (Ctrl-C in a terminal; systemd stopping the unit). The parent stops it after
    the final pass, which it could not run if those signals had already killed the child."""
    leave_with(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.nice(ARCHIVER_NICE)


def archive_child() -> ProcessPoolExecutor:
    """The one spawned process the embedded archiver's passes run in (niced: it yields to the gateway); it
    leaves with its parent."""
    return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_archiver_child, initargs=(os.getpid(),))


class EmbeddedArchiver:
    """Archives the embedded log in passes off the event loop; ``last_offset`` reads the live log's head."""

    def __init__(self, cfg: ArchiveSettings, root: Path, log_path: Path, last_offset: Callable[[], int],
                 derive: Derive | None = None, registry: CollectorRegistry | None = None,
                 poll_s: float = 0.25) -> None:
        self.cfg = cfg
        self.root = root
        self.log_path = log_path
        self.last_offset = last_offset
        self.poll_s = min(poll_s, self.cfg.flush_interval_s)
        self.archived = archived_offset(self.root)
        self.caught_up_at = time.monotonic()
        self.last_pass = float("-inf")  # the first due check runs a pass
        self.housekeeper = Housekeeper(self.root, self.cfg, derive)
        self._pass_lock: asyncio.Lock | None = None  # one pass at a time: the loop's and a reader's catch_up
        self._child: ProcessPoolExecutor | None = None  # started at the first pass; ``close`` stops it
        if registry is not None:
            Gauge("farebox_archive_lag_events", "Events in the log not yet in the Parquet archive.",
                  registry=registry).set_function(self.lag_events)
            Gauge("farebox_archive_lag_seconds", "Seconds since the archive last held the whole log (0: caught up).",
                  registry=registry).set_function(self.lag_seconds)
        self.head_gauge = Gauge("farebox_archive_head", "The archive manifest's head: its last entry's number, "
                                "labelled with that entry's hash (keep it elsewhere; `farebox archive verify "
                                "--expect-head`).", ["head"], registry=registry) if registry is not None else None
        self.publish_head()

    def publish_head(self) -> None:
        """Set ``farebox_archive_head`` to the manifest's current head (one labelled series)."""
        if self.head_gauge is not None:
            seq, head = Manifest(self.root).head()
            self.head_gauge.clear()
            self.head_gauge.labels(head=head).set(seq)

    def lag_events(self) -> int:
        return max(self.last_offset() - self.archived, 0)

    def lag_seconds(self) -> float:
        return 0.0 if self.lag_events() == 0 else time.monotonic() - self.caught_up_at

    def due(self) -> bool:
        lag = self.lag_events()
        return lag >= self.cfg.flush_events or (lag > 0 and time.monotonic() - self.last_pass >= self.cfg.flush_interval_s)

    def flush_sync(self) -> int:
        """One pass plus housekeeping when due; blocking. Events archived."""
        started = time.monotonic()
        if self._child is None:
            self._child = archive_child()
        try:
            backlog = self.cfg.decoders() if self.lag_events() > self.cfg.flush_events else 0
            archived, self.housekeeper = self._child.submit(
                archive_pass, self.log_path, self.root, self.cfg.flush_events, self.housekeeper, backlog).result()
        except BrokenProcessPool:  # the child died (killed, out of memory): a fresh one next pass
            self._child = None
            raise
        finally:
            self.archived = archived_offset(self.root)
            self.last_pass = time.monotonic()
            self.publish_head()
        if self.archived >= self.last_offset():
            self.caught_up_at = started  # every event appended before the pass began is archived
        return archived

    def close(self) -> None:
        """Stop the child process (blocking; after the last pass)."""
        if self._child is not None:
            try:
                self._child.submit(close_child_pool).result()
            except BrokenProcessPool:
                pass
            self._child.shutdown(wait=True)
            self._child = None

    async def _pass(self) -> int:
        if self._pass_lock is None:
            self._pass_lock = asyncio.Lock()
        async with self._pass_lock:
            return await asyncio.to_thread(self.flush_sync)

    async def catch_up(self) -> int:
        """A pass now, off the event loop, if the log holds events the archive lacks (a reader such as the admin
        usage API calls it first, so it sees the requests just served). Events archived."""
        if self.lag_events() == 0:
            return 0
        return await self._pass()

    async def run(self) -> None:
        """Until cancelled: a pass whenever one is due (or the daily housekeeping is, even with no traffic).
        A failed pass is logged and retried next time."""
        while True:
            if self.due() or self.housekeeper.due(datetime.now(timezone.utc)):
                try:
                    await self._pass()
                except Exception:  # noqa: BLE001 - the gateway keeps serving; the lag gauge shows the failure
                    log.exception("archive pass failed at offset %d", self.archived)
                    self.last_pass = time.monotonic()
                    await asyncio.sleep(self.cfg.flush_interval_s)  # retry at the normal pace, not every poll
            await asyncio.sleep(self.poll_s)


def embedded_archive_ctx(archiver: EmbeddedArchiver):
    """An aiohttp cleanup context: register it so it unwinds after the event log closed (its final pass
    then sees every accepted event)."""

    async def ctx(app) -> AsyncIterator[None]:  # type: ignore[no-untyped-def]
        task = asyncio.create_task(archiver.run())
        yield
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        try:
            await asyncio.to_thread(archiver.flush_sync)
        except Exception:  # noqa: BLE001 - the log is intact; the next start archives the rest
            log.exception("final archive pass failed; the next start archives the rest")
        finally:
            await asyncio.to_thread(archiver.close)

    return ctx
