"""Wiring the Faust worker (``farebox worker``): settings -> ``WorkerConfig`` -> a running app.

Budget limits come from the config database (the same snapshots the pods
follow), polled every ``poll_interval_s``; the worker keeps the last good one.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from zoneinfo import ZoneInfo

from farebox.budget_limits import Limits, lease_policy
from farebox.settings import Settings
from streams.kafka.internals import UntestedVersions, check_versions
from streams.worker.app import create_app
from streams.worker.state import Worker, WorkerConfig

log = logging.getLogger("farebox.worker")


def ensure_data_dir(path: Path) -> Path:
    """The worker's data folder (Faust's tables), created with its parents; a clear exit when it cannot be."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SystemExit(f"error: distributed.worker_data_dir: cannot create {path}: {exc.strerror or exc}") from None
    return path


def build_worker(settings: Settings) -> Worker:
    d = settings.distributed
    data_dir = ensure_data_dir(Path(d.worker_data_dir))
    limits = Limits(settings, required=True)
    cfg = WorkerConfig(
        bootstrap=d.bootstrap, redis_url=d.redis_url, tz=ZoneInfo(limits.snapshot.budgets.timezone),
        limit_for=limits.limit_for, soft_pct_for=limits.soft_pct_for, currency_for=limits.currency,
        app_id=d.worker_id, requests_topic=d.requests_topic, scope_topic=d.scope_topic,
        rollups_topic=d.rollups_topic, dead_letter_topic=d.dead_letter_topic, partitions=d.partitions, policy=lease_policy(settings),
        data_dir=data_dir, request_retention_s=d.request_retention_s, stall_s=d.worker_stall_s,
    )
    worker = create_app(cfg)

    @worker.app.timer(interval=max(settings.poll_interval_s, 1.0))
    async def follow_config() -> None:
        await limits.refresh()

    if d.worker_metrics_port:
        serve_worker_metrics(settings, worker)
    return worker


def serve_worker_metrics(settings: Settings, worker: Worker) -> None:
    """The worker's /metrics on ``server.host:distributed.worker_metrics_port``: consumer lag per source topic."""
    from prometheus_client import CollectorRegistry, start_http_server

    from streams.worker.lag import ConsumerLag

    d = settings.distributed
    registry = CollectorRegistry(auto_describe=True)
    registry.register(ConsumerLag(lambda: worker.app, (d.requests_topic, d.scope_topic)))
    try:
        start_http_server(d.worker_metrics_port, addr=settings.host, registry=registry)
    except OSError as exc:
        raise SystemExit(f"error: distributed.worker_metrics_port: cannot listen on {settings.host}:"
                         f"{d.worker_metrics_port}: {exc.strerror or exc}") from None


def run_worker(settings: Settings, loglevel: str = "warning") -> None:
    """Run the worker until it is stopped. Exits non-zero, naming the versions, if a library whose internals
    the worker relies on is not at a tested version (``streams.kafka.internals.TESTED_VERSIONS``)."""
    try:
        check_versions()
    except UntestedVersions as exc:
        raise SystemExit(f"error: {exc}") from None
    import faust
    import uvloop

    # uvloop for the worker's loops (Faust's, and the one its consumer thread makes): most of the worker's
    # time per event is asyncio plumbing (Faust's delivery to the agent, aiokafka); see ``make bench-distributed``
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    worker = build_worker(settings)
    runner = faust.Worker(worker.app, loglevel=loglevel, quiet=True)
    # Faust's terminal spinner sets the root logger to DEBUG (to spin on every record) and leaves it
    # there: every debug call in faust/aiokafka then builds a record. No spinner, the level we asked.
    runner.spinner = None
    runner.execute_from_commandline()
