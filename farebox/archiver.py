"""The archive's wiring: what the gateway's embedded archiver and ``farebox archiver`` are built from.

The archiving itself is ``streams.archive.service``; here it gets its settings, the finance side's
per-request table as its ``derive`` step (``reconcile.request_table_write.refresh_request_table`` in the
budget zone), and, for ``farebox archiver``, its process: signals, the decode pool, the Kafka consumer
and the cluster's alerts (one archiver per cluster raises them).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from prometheus_client import CollectorRegistry

from streams.archive.service import EmbeddedArchiver, Housekeeper

if TYPE_CHECKING:
    from farebox.settings import Settings  # the archiver's child unpickles RequestTable: it loads no YAML

log = logging.getLogger("farebox.archive")


@dataclass(frozen=True)
class RequestTable:
    """Housekeeping's ``derive`` step: the per-request table (``reconcile.request_table``) in budget zone ``tz``,
    written when files changed or it is missing. Runs in the archiver's child; DuckDB and pyarrow load there."""

    tz: str

    def __call__(self, root: Path, now: datetime, changed: bool) -> None:
        from reconcile.request_table import usable_table
        from reconcile.request_table_write import write_request_table
        from reconcile.warehouse import WarehouseError

        if changed or usable_table(root, self.tz) is None:
            try:
                write_request_table(root, self.tz, before=now.date(), now=now)
            except WarehouseError as exc:  # the raw events stay readable; verify and the warehouse name the file
                log.error("archive: per-request table not written: %s", exc)


def derive_of(settings: Settings) -> RequestTable:
    return RequestTable(settings.snapshot.budgets.timezone)


def embedded_archiver(settings: Settings, last_offset: Callable[[], int],
                      registry: CollectorRegistry | None = None) -> EmbeddedArchiver:
    """The embedded log's archiver, beside ``farebox serve`` (or the ``--workers`` owner)."""
    return EmbeddedArchiver(settings.archive, settings.archive_root, settings.event_log_path, last_offset,
                            derive_of(settings), registry)


async def run_kafka_archiver(settings: Settings, stop: asyncio.Event | None = None) -> int:
    """``farebox archiver``: archive the requests topic until SIGTERM/SIGINT (or ``stop``); events archived."""
    from farebox.observe import config_db_keys, running_alerts
    from streams.archive.kafka_source import KafkaArchiver
    from streams.config_topic import SNAPSHOT_KEY
    from streams.notify.kafka_feed import follow_topics

    cfg, d = settings.archive, settings.distributed
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    decoders = cfg.decoders()
    pool = None
    if decoders:
        from streams.archive.pool import DecodePool

        pool = DecodePool(decoders)
        await asyncio.to_thread(pool.start)
    archiver = KafkaArchiver(d.bootstrap, d.requests_topic, settings.archive_root, group_id=cfg.group_id,
                             batch_size=cfg.flush_events, flush_interval_s=cfg.flush_interval_s, pool=pool)

    async def housekeeping() -> None:
        keeper = Housekeeper(settings.archive_root, cfg, derive_of(settings))
        while not stop.is_set():
            if keeper.due(now := datetime.now(timezone.utc)):
                await asyncio.to_thread(keeper.run, now)
            try:
                await asyncio.wait_for(stop.wait(), timeout=60)
            except asyncio.TimeoutError:
                pass

    print(f"farebox archiver: {d.requests_topic} -> {settings.archive_root} (group {cfg.group_id}, "
          f"{decoders or 'no'} decode process(es))", flush=True)
    keeper = asyncio.create_task(housekeeping())
    alerts = settings.observability.alerts  # one archiver per cluster: the one process that raises alerts
    try:
        async with running_alerts(alerts, lambda feed: follow_topics(
                d.bootstrap, (d.requests_topic, d.scope_topic, d.config_topic), feed, skip_key=SNAPSHOT_KEY),
                config_db_keys(settings),
                                  archive_root=settings.archive_root):
            return await archiver.run(stop)
    finally:
        stop.set()
        await keeper
        if pool is not None:
            await asyncio.to_thread(pool.close)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
