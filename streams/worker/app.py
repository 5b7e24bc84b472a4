"""The Faust worker app (distributed mode): its settings, topics and tables, with every agent registered.

``create_app(cfg)`` checks the versions of the libraries whose internals the
worker relies on and applies its patches (``streams.kafka.internals``), then
builds a ``faust.App`` with:

* topics: ``fb.requests`` (request events, keyed by team),
  ``fb.scope-entries`` (per-scope entries and lease traffic, keyed by
  scope), ``fb.rollups``;
* tables (in-memory stores, recovered from their Kafka changelogs at start):
  ``requests`` (request id -> open/closed state, written by the splitter,
  closed states deleted after ``request_retention_s``: ``ledger.retention``),
  ``scope-ledger`` (scope -> ``ScopeLedger.to_dict()``, written only by the
  ledger agent), ``rollups`` (team|key|alias|deployment|minute -> counters);
* the agents and timers of ``streams.worker``: ``split``, ``ledger`` (with
  ``leases``), ``rollups``, ``sweeper``, ``projections``, and the rebalance
  handlers (``rebalance``), all sharing one ``WorkerState``;
* the recovery watchdog (``streams.watchdog``) when ``stall_s`` > 0.

A table key is always written while processing an event of the partition
that owns it (a request's events are all in its team's partition, a scope's
entries in its scope's partition), so each changelog partition holds exactly
the keys of its source partition and recovery gives each worker its own keys.
Offsets are committed only for acknowledged events (``processing_guarantee``
at least once, ``streams.kafka.internals.strict_commits``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import faust
import redis.asyncio as aioredis

from streams.kafka.internals import apply_patches
from streams.projections import RedisProjections
from streams.watchdog import watch
from streams.worker import ledger, projections, rebalance, rollups, split, sweeper
from streams.worker.state import Worker, WorkerConfig, WorkerState


def faust_app(cfg: WorkerConfig) -> faust.App:
    return faust.App(
        cfg.app_id,
        broker=f"kafka://{cfg.bootstrap}",
        store="memory://",
        datadir=str(cfg.data_dir),
        topic_partitions=cfg.partitions,
        topic_allow_declare=True,
        topic_disable_leader=True,
        web_enabled=False,
        processing_guarantee="at_least_once",
        # commit by the interval only: every N acks Faust would commit inline in its delivery loop (producer
        # flush and a commit round trip, nothing delivered meanwhile)
        broker_commit_every=100_000,
        broker_commit_interval=1.0,
        producer_linger=0.005,
        producer_acks=-1,
        # a flush's records go in few large batches: with the default 16 KiB, aiokafka waits a round trip
        # per full batch of a partition (one in flight each)
        producer_max_batch_size=512 * 1024,
        stream_wait_empty=False,
        # a worker restarted after a crash gets its partitions back in seconds, not the default minute
        # (pods without leases wait on it)
        broker_session_timeout=10.0,
        broker_heartbeat_interval=1.0,
        table_cleanup_interval=3600.0,
        # no standby replicas: Faust's promotion of a standby partition to active can hang its recovery
        # (tests/distributed/test_worker_join.py); a partition that moves is recovered from its changelog like
        # one assigned at start (seconds for these tables)
        table_standby_replicas=0,
        consumer_auto_offset_reset="earliest",
    )


def create_app(cfg: WorkerConfig) -> Worker:
    """The worker's app with its agents registered; raises ``UntestedVersions`` on an untested library."""
    apply_patches()
    app = faust_app(cfg)

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
        projections=RedisProjections(aioredis.Redis.from_url(cfg.redis_url)),
    )
    state = WorkerState()
    for module in (split, ledger, rollups, sweeper, projections, rebalance):
        module.register(worker, state)
    if cfg.stall_s > 0:
        _watch_recovery(app, cfg.stall_s)
    return worker


def _watch_recovery(app: faust.App, stall_s: float) -> None:
    """Start ``streams.watchdog.watch`` with the first assignment: before the first recovery, which app tasks
    (started only after it) would miss."""
    started: list[asyncio.Task] = []

    @app.on_partitions_assigned.connect  # type: ignore[misc]
    async def start_watchdog(sender: Any, assigned: Any, **kwargs: Any) -> None:
        if not started:
            started.append(asyncio.ensure_future(watch(app, stall_s)))
