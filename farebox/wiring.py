"""Wiring the embedded mode: one process, SQLite event log, in-process everything.

Shutdown order (tested by killing and by SIGTERM): stop accepting, let
in-flight requests finish (aiohttp's shutdown timeout), close the upstream
session, then close the event log, which flushes every accepted event.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import AsyncIterator
from zoneinfo import ZoneInfo

from aiohttp import web

from farebox.reload import EmbeddedControl, Reloader
from farebox.settings import Settings
from pricing.tokenizer import encoding_for_model, preload
from proxy.admission.budgets import BudgetGate
from proxy.admission.limits import MemoryBuckets
from proxy.admission.sweeper import sweep_forever
from proxy.api.app import create_app
from proxy.control.snapshot import Secrets
from proxy.runtime import ProxyOptions, Runtime
from streams.checkpoints import CheckpointStore
from streams.runner import EmbeddedLedgerRunner
from streams.sqlite_log import SqliteEventLog

log = logging.getLogger("farebox")


def build_runtime(settings: Settings, secrets: Secrets, events) -> Runtime:
    options = ProxyOptions(
        pod_id=settings.pod_id, max_body_bytes=settings.max_body_bytes, hold_ttl_s=settings.hold_ttl_s
    )
    return Runtime(snapshot=settings.snapshot, secrets=secrets, events=events, options=options, rng=random.Random())


async def gateway_app(settings: Settings, secrets: Secrets) -> web.Application:
    """The embedded gateway: the SQLite log opens first and closes last.

    Start-up: open the log, rebuild the ledger from the latest checkpoint,
    then serve. Shutdown (reverse): stop the watcher and sweeper, let requests
    finish, close the upstream session, fold and checkpoint, close the log.
    """
    events = SqliteEventLog.open(settings.event_log_path)
    store = CheckpointStore(f"{settings.event_log_path}.checkpoints")
    runner = EmbeddedLedgerRunner(events, store, ZoneInfo(settings.snapshot.budgets.timezone))
    ledger = await runner.start()
    runtime = build_runtime(settings, secrets, events)
    runtime.budgets = BudgetGate(ledger)
    runtime.limits = MemoryBuckets()  # one process: exact in-process buckets
    # Load exact tokenizers now, not on the first request (tens of ms each).
    preload(*{e for d in settings.snapshot.deployments.values() if (e := encoding_for_model(d.model, d.tokenizer))})
    app = create_app(runtime)

    async def event_log_ctx(app: web.Application) -> AsyncIterator[None]:
        follower = asyncio.create_task(runner.follow())
        sweeper = asyncio.create_task(sweep_forever(runtime, settings.sweep_interval_s))
        yield
        for task in (follower, sweeper):
            task.cancel()
        await asyncio.gather(follower, sweeper, return_exceptions=True)
        try:
            await runner.final_checkpoint()
        finally:
            await events.close()
            store.close()

    reloader = Reloader(settings, runtime.swap)
    runtime.control = EmbeddedControl(settings, reloader)

    async def reload_ctx(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(reloader.watch())
        yield
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    # cleanup_ctx unwinds in reverse: the log is registered first so it closes last.
    app.cleanup_ctx.insert(0, event_log_ctx)
    app.cleanup_ctx.append(reload_ctx)
    return app


def new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; stay runnable without it
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def serve(settings: Settings, secrets: Secrets) -> None:
    loop = new_loop()
    ready = (
        f"farebox serving on http://{settings.host}:{settings.port} "
        f"(pod {settings.pod_id}, snapshot {settings.snapshot.version}, events {settings.event_log_path})"
    )
    web.run_app(
        gateway_app(settings, secrets),
        host=settings.host,
        port=settings.port,
        loop=loop,
        print=lambda _: print(ready, flush=True),
        access_log=None,
        shutdown_timeout=30.0,
        backlog=1024,  # aiohttp's default 128 overflows under bursts; a full queue costs 1-3 s client retries
    )
