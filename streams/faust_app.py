"""The Faust worker app (distributed mode): topics, tables and the settings the agents need.

``create_app(cfg)`` builds a ``faust.App`` with:

* topics: ``fb.requests`` (request events, keyed by team), ``fb.scope-entries``
  (per-scope entries and lease traffic, keyed by scope), ``fb.rollups``;
* tables (in-memory stores, recovered from their Kafka changelogs at start):
  ``requests`` (request id -> open/closed state, written by the splitter,
  closed states deleted after ``request_retention_s``: ``ledger.retention``),
  ``scope_ledger`` (scope -> ``ScopeLedger.to_dict()``, written only by the
  ledger agent), ``rollups`` (team|key|alias|deployment|minute -> counters);
* the agents in ``streams.agents`` (registered by ``register``).

A table key is always written while processing an event of the partition
that owns it (a request's events are all in its team's partition, a scope's
entries in its scope's partition), so each changelog partition holds exactly
the keys of its source partition and recovery gives each worker its own keys.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from zoneinfo import ZoneInfo

import faust

from ledger.leases import LeasePolicy
from ledger.retention import DEFAULT_RETENTION_S
from streams.faust_patches import apply_patches


@dataclass(frozen=True)
class WorkerConfig:
    bootstrap: str
    redis_url: str
    tz: ZoneInfo
    limit_for: Callable[[str], int | None]  # a scope's hard limit now (None: unlimited)
    soft_pct_for: Callable[[str], int] = lambda scope: 80
    currency_for: Callable[[], str] = lambda: "INR"  # the budget currency (of the notices)
    app_id: str = "farebox-worker"
    requests_topic: str = "fb.requests"
    scope_topic: str = "fb.scope-entries"
    rollups_topic: str = "fb.rollups"
    dead_letter_topic: str = "fb.dead-letter"
    partitions: int = 3
    policy: LeasePolicy = field(default_factory=LeasePolicy)
    data_dir: Path = Path("var/worker")
    sweep_interval_s: float = 1.0
    projection_interval_s: float = 0.1
    request_retention_s: float = DEFAULT_RETENTION_S  # closed request states are forgotten after it
    prune_batch: int = 100  # at most this many forgotten per batch: no pause when a minute's worth falls due
    # Agents flush their writes every batch_max events, or within their window after a batch's first
    # event (streams.batching): the scope ledger's is short (its table writes; grants go at once), the
    # splitter's longer (a request's events then often share a batch: its state is written once).
    batch_max: int = 4000
    scope_within_s: float = 0.005
    split_within_s: float = 0.1
    rollup_within_s: float = 0.5
    # a table recovery that reads nothing for this long ends the worker, for its supervisor to restart it
    # (streams.watchdog; 0: never)
    stall_s: float = 60.0


@dataclass
class Worker:
    """The app and its handles, so agents and timers find them without globals."""

    cfg: WorkerConfig
    app: faust.App
    requests: faust.TopicT
    entries: faust.TopicT
    rollups: faust.TopicT
    request_states: faust.Table
    scope_ledger: faust.Table
    rollup_table: faust.Table


def create_app(cfg: WorkerConfig) -> Worker:
    apply_patches()
    app = faust.App(
        cfg.app_id,
        broker=f"kafka://{cfg.bootstrap}",
        store="memory://",
        datadir=str(cfg.data_dir),
        topic_partitions=cfg.partitions,
        topic_allow_declare=True,
        topic_disable_leader=True,
        web_enabled=False,
        processing_guarantee="at_least_once",
        # commit by the interval only: Faust commits every N acks inline in its delivery loop (producer flush +
        # commit round trip, nothing delivered meanwhile); measured ~4,000-4,700 at 1,000 vs ~4,800-4,950
        broker_commit_every=100_000,
        broker_commit_interval=1.0,
        producer_linger=0.005,
        producer_acks=-1,
        # a flush's records go in few large batches: with the default 16 KiB, aiokafka waits a round trip
        # per full batch of a partition (one in flight each), ~40 ms per splitter flush
        producer_max_batch_size=512 * 1024,
        stream_wait_empty=False,
        # a worker restarted after a crash gets its partitions back in seconds, not the default minute
        # (pods without leases wait on it)
        broker_session_timeout=10.0,
        broker_heartbeat_interval=1.0,
        table_cleanup_interval=3600.0,
        # no standby replicas: a partition promoted from standby to active hung Faust's recovery ("No event
        # received for active tp ... since recovery start", tests/distributed/test_worker_join.py); a partition
        # that moves is recovered from its changelog like one assigned at start (seconds for our tables)
        table_standby_replicas=0,
        consumer_auto_offset_reset="earliest",
    )

    def raw(name: str) -> faust.TopicT:
        return app.topic(name, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw",
                         partitions=cfg.partitions)

    worker = Worker(
        cfg=cfg,
        app=app,
        requests=raw(cfg.requests_topic),
        entries=raw(cfg.scope_topic),
        rollups=raw(cfg.rollups_topic),
        request_states=app.Table("requests", default=None, partitions=cfg.partitions),
        scope_ledger=app.Table("scope-ledger", default=None, partitions=cfg.partitions),
        rollup_table=app.Table("rollups", default=None, partitions=cfg.partitions),
    )
    from streams.agents import register

    register(worker)
    if cfg.stall_s > 0:
        _watch_recovery(app, cfg.stall_s)
    return worker


def _watch_recovery(app: faust.App, stall_s: float) -> None:
    """Start ``streams.watchdog.watch`` with the first assignment: before the first recovery, which app tasks
    (started only after it) would miss."""
    from streams.watchdog import watch

    started: list[asyncio.Task] = []

    @app.on_partitions_assigned.connect  # type: ignore[misc]
    async def start_watchdog(sender, assigned, **kwargs) -> None:  # type: ignore[no-untyped-def]
        if not started:
            started.append(asyncio.ensure_future(watch(app, stall_s)))
