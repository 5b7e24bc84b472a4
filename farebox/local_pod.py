"""Wiring one gateway process of ``farebox serve --workers N`` (the owner is ``farebox.workers``).

A gateway process is a distributed pod whose transport is local: its events
go to the owner's SQLite log over the owner's socket (``streams.local.log``),
its budget money comes from leases the owner's ledger processor grants
(``Wallets``, ``LeaseBudgets``: the same protocol as across machines), and
the soft/hard readings from the owner's projection rows, polled like the
worker's Redis hashes. ``Idempotency-Key`` records are the owner's
(``OwnerIdempotency``: a retry may reach another process). Rate limits and
the response caches are this process's own: each of N processes holds
``limit // N`` of every rate bucket (approximate, as distributed pods are
when Redis is away), and a cached answer serves the process that stored it.

Shutdown: stop the pollers, let requests finish, return every lease, then
flush and close the connection (every event acknowledged by the owner). If
the owner goes away the process stops: it cannot record.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from pathlib import Path

from aiohttp import web

from farebox.pod import ArchiveRerater, build_runtime, serve_pod, start_pod
from farebox.settings import Settings
from farebox.usage import attach_usage
from proxy.admission.lease_budgets import LeaseBudgets
from proxy.admission.scope_states import ScopeStates
from proxy.admission.wallet import WalletPolicy, Wallets
from proxy.control.follow import follow_ctx
from proxy.control.service import ControlService
from proxy.idempotency.owner import OwnerIdempotency
from proxy.limits import MemoryBuckets
from proxy.metering.recorder import Recorder
from proxy.observe.metrics import Metrics
from proxy.runtime import PodState
from streams.local.log import LocalEventLog

log = logging.getLogger("farebox")


def die_with_owner(owner_pid: int) -> None:
    """Linux: this process gets SIGTERM when the owner dies, however it dies (the socket's loss stops it
    too; this covers an owner killed before the connection was made). Elsewhere a no-op."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != owner_pid:  # the owner died before prctl took effect
        _stop_process()


def _stop_process() -> None:
    """The owner is gone: stop as on SIGTERM (aiohttp drains, then the cleanup contexts run)."""
    os.kill(os.getpid(), signal.SIGTERM)


async def local_gateway_app(settings: Settings, socket: Path, processes: int,
                            metrics_dir: str | None = None) -> web.Application:
    """``metrics_dir``: the owner's ``PROMETHEUS_MULTIPROC_DIR`` (``GET /metrics`` sums every process)."""
    start = await start_pod(settings)
    db, follower, snapshot, secrets = start.db, start.follower, start.snapshot, start.secrets
    d = settings.distributed
    events = await LocalEventLog.connect(socket, settings.pod_id, on_lost=_stop_process)
    recorder = Recorder(events, Metrics(metrics_dir))  # the owner's processor keeps the ledger; this process keeps none
    wallets = Wallets(settings.pod_id, recorder.emit, lambda: datetime.now(timezone.utc),
                      WalletPolicy(lease_wait_s=d.lease_wait_s, low_water_pct=d.low_water_pct,
                                   emergency_micro=d.emergency_micro),
                      kafka_up=lambda: events.connected, states=ScopeStates(),
                      observe_rtt=recorder.metrics.lease_round_trip_seconds.observe)
    events.on_grant = wallets.on_grant
    control = None if db is None else ControlService(
        db, price_change_factor=settings.price_change_factor, adopt=follower.adopt, status=follower.status,
        secret_hosts=settings.secret_hosts,
        approve_budgets_above_micro=settings.approve_budgets_above_micro)
    pod = PodState(snapshot)
    budgets = LeaseBudgets(wallets, settings.hold_ttl_s, read_scope=events.read_scope)
    runtime = build_runtime(settings, secrets, pod, recorder=recorder, budgets=budgets,
                            limits=MemoryBuckets(share=processes), control=control, rerater=ArchiveRerater(settings),
                            idempotency=OwnerIdempotency(events.call))
    state = recorder.metrics.state
    state.lease_grants, state.lease_returns = lambda: wallets.stats["granted"], lambda: wallets.stats["returned"]
    owner: dict = {"budget_use": [], "archive_lag": [0, 0.0]}  # refreshed by _follow_owner
    state.budget_use = lambda: [tuple(row) for row in owner["budget_use"]]
    state.archive_lag = lambda: tuple(owner["archive_lag"])
    app = serve_pod(start, runtime, recorder)
    attach_usage(app, settings.archive_root, state=state)  # the owner's archiver keeps this archive

    async def event_log_ctx(app: web.Application) -> AsyncIterator[None]:
        yield
        await events.close()  # every event this process recorded is acknowledged by the owner

    async def wallet_ctx(app: web.Application) -> AsyncIterator[None]:
        tasks = [asyncio.create_task(_follow_scopes(events, wallets.states)),
                 asyncio.create_task(_sweep(wallets)), asyncio.create_task(_follow_owner(events, owner))]
        yield
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        returned, micro = wallets.close()  # requests have finished: give back every unspent slice
        log.info("shutdown: returned %d lease(s) (%d micro) to the ledger", returned, micro)

    app.cleanup_ctx.insert(0, event_log_ctx)
    app.cleanup_ctx.insert(1, wallet_ctx)
    app.cleanup_ctx.append(functools.partial(follow_ctx, follower=follower, emit=recorder.emit, db=db))
    return app


async def _follow_scopes(events: LocalEventLog, states: ScopeStates, interval_s: float = 0.2) -> None:
    """The owner's rows of the scopes this process's requests touch, a few times a second."""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(interval_s)
        scopes = states.wanted(loop.time())
        if not scopes or not events.connected:
            continue
        try:
            rows = await events.rows(scopes)
        except Exception:  # noqa: BLE001 - the owner is away: readings go stale and are ignored
            continue
        states.update(rows, loop.time())


async def _follow_owner(events: LocalEventLog, out: dict, interval_s: float = 2.0) -> None:
    """For /metrics: the owner's budget use and archive lag, every ``interval_s``."""
    while True:
        if events.connected:
            try:
                out.update(await events.call("owner.stats", {}))
            except Exception:  # noqa: BLE001 - keep the last reading
                log.debug("owner stats unavailable", exc_info=True)
        await asyncio.sleep(interval_s)


async def _sweep(wallets: Wallets, interval_s: float = 1.0) -> None:
    while True:
        await asyncio.sleep(interval_s)
        wallets.sweep()
