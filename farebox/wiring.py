"""Wiring the embedded mode: one process, SQLite event log, in-process everything.

Shutdown order (tested by killing and by SIGTERM): stop accepting, let
in-flight requests finish (aiohttp's shutdown timeout), close the upstream
session, then close the event log, which flushes every accepted event.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import os
from pathlib import Path
from typing import AsyncIterator
from zoneinfo import ZoneInfo

from aiohttp import web

from farebox.archiver import embedded_archiver
from farebox.internal_socket import internal_socket
from farebox.logs import configure_logging
from farebox.observe import alerts_ctx, expiring_keys
from farebox.pod import ArchiveRerater, build_runtime, serve_pod, start_pod
from farebox.settings import Settings
from farebox.usage import attach_usage
from pricing.tokenizer import encoding_for_model, preload
from proxy.admission.budgets import LedgerBudgets
from proxy.admission.sweeper import sweep_forever
from proxy.control.follow import follow_ctx
from proxy.control.service import ControlService
from proxy.limits import MemoryBuckets
from proxy.metering.recorder import Recorder
from proxy.observe.metrics import Metrics
from proxy.runtime import PodState
from proxy.snapshot import Secrets
from streams.archive.service import embedded_archive_ctx
from streams.checkpoints import CheckpointStore
from streams.runner import EmbeddedLedgerRunner
from streams.sqlite_log import SqliteEventLog

log = logging.getLogger("farebox")


async def gateway_app(settings: Settings, secrets: Secrets | None = None) -> web.Application:
    """The embedded gateway: the SQLite log opens first and closes last.

    Start-up: open the config database (migrate; seed from the YAML on first
    start) and take its snapshot — or the last good one from disk when the
    database is down; open the log, rebuild the ledger from the latest
    checkpoint, then serve. Shutdown (reverse): stop the follower and sweeper,
    let requests finish, close the upstream session, fold and checkpoint,
    close the log, dispose of the database pool.
    """
    start = await start_pod(settings, secrets)
    db, follower, snapshot, secrets = start.db, start.follower, start.snapshot, start.secrets
    events = SqliteEventLog.open(settings.event_log_path)
    store = CheckpointStore(f"{settings.event_log_path}.checkpoints")
    runner = EmbeddedLedgerRunner(events, store, ZoneInfo(snapshot.budgets.timezone))
    ledger = await runner.start()
    # Append first, then fold what the log took into the live ledger admission decides on; the
    # checkpointed ledger folds what the log acknowledged as durable.
    budgets = LedgerBudgets(ledger)  # its fold wakes the requests waiting for in-flight holds to settle
    recorder = Recorder(events, Metrics(), fold=budgets.fold, on_durable=runner.acknowledged)
    if db is None:  # started from disk: admin writes answer 503 until a restart finds the database
        from proxy.control.db.store import ConfigDB

        db = ConfigDB(settings.control_db_url)
        follower.db = db
    control = ControlService(db, price_change_factor=settings.price_change_factor, adopt=follower.adopt,
                             status=follower.status, secret_hosts=settings.secret_hosts,
                             approve_budgets_above_micro=settings.approve_budgets_above_micro)
    pod = PodState(snapshot)
    runtime = build_runtime(settings, secrets, pod, recorder=recorder, budgets=budgets,
                            limits=MemoryBuckets(), control=control, rerater=ArchiveRerater(settings),
                            responses_shared=False)  # one process: exact in-process buckets, its own responses
    # Load exact tokenizers now, not on the first request (tens of ms each).
    preload(*{e for d in snapshot.deployments.values() if (e := encoding_for_model(d.model, d.tokenizer))})
    recorder.metrics.state.queue_depth = budgets.queue.depth  # read at scrape time
    recorder.metrics.state.budget_use = lambda: budgets.usage(pod.snapshot, runtime.clock())
    app = serve_pod(start, runtime, recorder)
    app.cleanup_ctx.append(alerts_ctx(settings.observability.alerts, events, lambda: expiring_keys(pod.snapshot),
                                      settings.archive_root))

    async def event_log_ctx(app: web.Application) -> AsyncIterator[None]:
        follower = asyncio.create_task(runner.follow())
        sweeper = asyncio.create_task(sweep_forever(ledger, recorder.emit, recorder.metrics, runtime.clock,
                                                    settings.sweep_interval_s))
        yield
        for task in (follower, sweeper):
            task.cancel()
        await asyncio.gather(follower, sweeper, return_exceptions=True)
        try:
            await runner.final_checkpoint()
        finally:
            await events.close()
            store.close()

    # cleanup_ctx unwinds in reverse: the log is registered first so it closes last.
    app.cleanup_ctx.insert(0, event_log_ctx)
    archiver = embedded_archiver(settings, lambda: events.last_offset, recorder.metrics.registry)
    app.cleanup_ctx.insert(0, embedded_archive_ctx(archiver))  # unwinds after the log closed

    async def fresh_archive() -> None:
        await events.flush()  # every event accepted so far is in the log file
        await archiver.catch_up()

    attach_usage(app, settings.archive_root, fresh_archive, state=recorder.metrics.state)  # GET /admin/v1/usage sees what was just served
    app.cleanup_ctx.append(functools.partial(follow_ctx, follower=follower, emit=recorder.emit, db=db))
    return app


def new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; stay runnable without it
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


# A request holds a few hundred container objects while in flight and frees them by reference counting when
# it ends, so the youngest generation is collected every 20,000 net allocations, not the default 700 (which
# ran every few requests under load and found almost nothing). Cyclic garbage (a cancelled task's exception
# and frames) waits at most 20,000 objects' worth for its collection.
GC_THRESHOLDS = (20_000, 10, 10)


def tune_gc() -> None:
    """Once serving: keep start-up objects (snapshot, ledger rebuilt from the log, tokenizers) out of
    every later collection, so a full collection scans only what requests allocated since; collect the
    youngest generation every ``GC_THRESHOLDS[0]`` net allocations, not every 700."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def _ready(line: str, _aiohttp_banner: str) -> None:
    """Once listening: tune the collector, then say so (tests and scripts wait for this line)."""
    tune_gc()
    print(line, flush=True)


def serve(settings: Settings, secrets: Secrets | None = None, *, gateway_of: Path | None = None,
          processes: int = 1) -> None:
    """One gateway process: embedded, a distributed pod, or (``gateway_of``: the owner's socket) one of
    ``farebox serve --workers N``'s ``processes``, sharing the port with its siblings."""
    configure_logging(settings.observability.logging)
    loop = new_loop()
    ready = (
        f"farebox serving on http://{settings.host}:{settings.port} "
        f"(pod {settings.pod_id}, config {settings.safe_db_url}, "
        f"events {settings.event_log_path if settings.mode == 'embedded' else settings.distributed.bootstrap})"
    )
    if gateway_of is not None:
        from farebox.local_pod import local_gateway_app

        factory = local_gateway_app(settings, gateway_of, processes, os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
    elif settings.mode == "distributed":
        from farebox.distributed import distributed_gateway_app

        factory = distributed_gateway_app(settings, secrets)
    else:
        factory = gateway_app(settings, secrets)
    web.run_app(
        factory,
        host=settings.host,
        port=settings.port,
        loop=loop,
        print=functools.partial(_ready, ready),
        access_log=None,
        shutdown_timeout=settings.drain_timeout_s + 10.0,  # longer than the drain, which ends streams itself
        backlog=1024,  # aiohttp's default 128 overflows under bursts; a full queue costs 1-3 s client retries
        reuse_port=gateway_of is not None,
        path=str(internal_socket()),  # the batch runner's way to this process's own gateway
    )
