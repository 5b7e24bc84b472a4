"""``farebox serve --workers N`` (N >= 2): one owner process and N gateway processes on one port.

The owner holds what has one writer: the SQLite event log, the ledger
processor (``ledger.local_processor``, every scope's leases), the embedded
ledger runner and its checkpoints (what ``farebox replay`` compares with),
the archiver child, the alerts and the ``Idempotency-Key`` records (a
client's retry may reach another process). It serves no HTTP itself: it starts N
gateway processes (``farebox.local_pod``), each binding the same port with
``SO_REUSEPORT`` (the kernel spreads connections over them), which record
through the owner's socket (``streams.local.hub``) and spend budget leases
it grants: budgets stay exact across the processes by the lease protocol of
distributed mode, with the owner as its ledger processor.

Supervision: a gateway process that exits (killed) is started again under
the same pod id; what it held comes back to the scopes when its holds' and
leases' TTLs pass. Events it had sent were acknowledged durable one by one;
what it had not sent is lost with its requests, whose callers saw the
connection drop. Shutdown (SIGTERM/SIGINT): the gateways drain and return
their leases, then the owner folds, checkpoints and closes the log.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import shutil
import signal
import sys
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from aiohttp import web
from prometheus_client.multiprocess import mark_process_dead

from farebox.archiver import embedded_archiver
from farebox.budget_limits import Limits, lease_policy
from farebox.observe import alerts_ctx, expiring_keys
from farebox.pod import local_idempotency
from farebox.settings import Settings
from ledger.local_processor import LocalProcessor
from ledger.periods import period_of
from proxy.idempotency.owner import handlers as idempotency_handlers
from streams.archive.service import EmbeddedArchiver, embedded_archive_ctx
from streams.checkpoints import CheckpointStore
from streams.local.hub import LocalHub
from streams.runner import EmbeddedLedgerRunner
from streams.sqlite_log import SqliteEventLog

log = logging.getLogger("farebox.workers")
READY = "farebox serving on"


def socket_path(settings: Settings) -> Path:
    return Path(settings.state_dir) / "workers.sock"


class Gateways:
    """The N gateway processes: started, watched, restarted when one exits, stopped at shutdown."""

    def __init__(self, settings: Settings, count: int) -> None:
        self.settings = settings
        self.count = count
        self.procs: dict[int, asyncio.subprocess.Process] = {}
        self.ready: dict[int, asyncio.Event] = {}
        self.stopping = False
        self.restarts = 0
        self._watchers: list[asyncio.Task[None]] = []
        self.pids_file = Path(settings.state_dir) / "workers.json"
        # every gateway process's metric values, summed by whichever answers GET /metrics (prometheus_client's
        # multiprocess mode); emptied at start, a dead process's live gauges dropped when it exits
        self.metrics_dir = Path(settings.state_dir) / "metrics"
        shutil.rmtree(self.metrics_dir, ignore_errors=True)
        self.metrics_dir.mkdir(parents=True)

    def pod_id(self, index: int) -> str:
        return f"{self.settings.pod_id}-{index}"

    async def start_all(self) -> None:
        for index in range(1, self.count + 1):
            self.ready[index] = asyncio.Event()
            self._watchers.append(asyncio.create_task(self._run(index)))
        await asyncio.gather(*(event.wait() for event in self.ready.values()))

    async def _spawn(self, index: int) -> asyncio.subprocess.Process:
        s = self.settings
        argv = [sys.executable, "-m", "farebox", "serve", "--config", str(s.config_path), "--host", s.host,
                "--port", str(s.port), "--gateway-of", str(socket_path(s)), "--processes", str(self.count),
                "--pod-id", self.pod_id(index)]
        env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(self.metrics_dir)}
        proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, env=env)
        self.procs[index] = proc
        self._write_pids()
        print(f"farebox gateway process {index} of {self.count}: pid {proc.pid} (pod {self.pod_id(index)})",
              flush=True)
        return proc

    async def _run(self, index: int) -> None:
        while not self.stopping:
            proc = await self._spawn(index)
            assert proc.stdout is not None
            while line := await proc.stdout.readline():
                text = line.decode(errors="replace").rstrip("\n")
                if text.startswith(READY):
                    self.ready[index].set()
                else:
                    print(text, flush=True)
            code = await proc.wait()
            mark_process_dead(proc.pid, str(self.metrics_dir))
            if self.stopping:
                return
            self.restarts += 1
            log.warning("gateway process %d (pid %d) exited with %s; starting it again", index, proc.pid, code)
            await asyncio.sleep(0.5)

    def _write_pids(self) -> None:
        pids = {str(i): p.pid for i, p in self.procs.items()}
        self.pids_file.write_text(json.dumps(pids))

    async def stop(self, timeout_s: float) -> None:
        self.stopping = True
        for proc in self.procs.values():
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        waits = [asyncio.ensure_future(p.wait()) for p in self.procs.values()]
        if waits:
            _, late = await asyncio.wait(waits, timeout=timeout_s)
            for index, proc in self.procs.items():
                if proc.returncode is None:
                    log.warning("gateway process %d did not stop within %.0fs; killed", index, timeout_s)
                    proc.kill()
            if late:
                await asyncio.gather(*late, return_exceptions=True)
        for task in self._watchers:
            task.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)
        self.pids_file.unlink(missing_ok=True)


async def owner_stats(limits: Limits, processor: LocalProcessor, archiver: EmbeddedArchiver,
                      args: dict[str, Any]) -> dict[str, Any]:
    """What the gateways' ``/metrics`` show of the owner: budget use this month (settled + held of each
    limited team and business unit) and the archive's lag behind the log."""
    snapshot = limits.snapshot
    now = datetime.now(timezone.utc)
    period = period_of(now, ZoneInfo(snapshot.budgets.timezone))
    use = []
    for scope, limit in snapshot.budgets.scopes.items():
        if limit.limit_micro is not None and scope.startswith(("team:", "bu:")):
            t = processor.scope(scope).totals(period)
            use.append([scope, t.settled + t.held, limit.limit_micro, limit.soft_pct])
    return {"budget_use": use, "archive_lag": [archiver.lag_events(), archiver.lag_seconds()]}


def owner_app(settings: Settings, limits: Limits, events: SqliteEventLog, runner: EmbeddedLedgerRunner,
              hub: LocalHub, archiver: EmbeddedArchiver) -> web.Application:
    """The owner's lifetime as aiohttp cleanup contexts (no routes): the log opens first and closes last."""
    app = web.Application()

    async def event_log_ctx(app: web.Application) -> AsyncIterator[None]:
        tasks = [asyncio.create_task(runner.follow()), asyncio.create_task(limits.follow())]
        await hub.start()
        yield
        await hub.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        try:
            await runner.final_checkpoint()
        finally:
            await events.close()
            runner.store.close()

    app.cleanup_ctx.append(embedded_archive_ctx(archiver))  # unwinds after the log closed
    app.cleanup_ctx.append(event_log_ctx)
    app.cleanup_ctx.append(alerts_ctx(settings.observability.alerts, events,
                                      lambda: expiring_keys(limits.snapshot), settings.archive_root))
    return app


async def run_owner(settings: Settings, count: int) -> None:
    limits = await asyncio.to_thread(Limits, settings)
    tz = ZoneInfo(limits.snapshot.budgets.timezone)
    events = SqliteEventLog.open(settings.event_log_path)
    runner = EmbeddedLedgerRunner(events, CheckpointStore(f"{settings.event_log_path}.checkpoints"), tz)
    await runner.start()
    processor = LocalProcessor(tz, limits.limit_for, limits.soft_pct_for, limits.currency,
                               lease_policy(settings), settings.distributed.request_retention_s)
    archiver = embedded_archiver(settings, lambda: events.last_offset)
    calls = idempotency_handlers(local_idempotency(settings))  # one store: a
    # retry may reach another process
    calls["owner.stats"] = functools.partial(owner_stats, limits, processor, archiver)
    hub = LocalHub(socket_path(settings), events, processor, on_durable=runner.acknowledged,
                   sweep_interval_s=min(settings.sweep_interval_s, 1.0), handlers=calls)
    folded = await hub.rebuild()
    log.info("ledger processor rebuilt from %d events of %s", folded, settings.event_log_path)
    app_runner = web.AppRunner(owner_app(settings, limits, events, runner, hub, archiver), handle_signals=False)
    await app_runner.setup()
    gateways = Gateways(settings, count)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        starting = asyncio.create_task(gateways.start_all())
        done, _ = await asyncio.wait({starting, asyncio.create_task(stop.wait())},
                                     return_when=asyncio.FIRST_COMPLETED)
        if starting in done:
            print(f"{READY} http://{settings.host}:{settings.port} ({count} gateway processes, owner pod "
                  f"{settings.pod_id}, config {settings.safe_db_url}, events {settings.event_log_path})", flush=True)
            await stop.wait()
        else:
            starting.cancel()
    finally:
        await gateways.stop(settings.drain_timeout_s + 15.0)
        await app_runner.cleanup()


def serve_workers(settings: Settings, count: int) -> None:
    from farebox.logs import configure_logging
    from farebox.wiring import new_loop

    configure_logging(settings.observability.logging)
    loop = new_loop()
    try:
        loop.run_until_complete(run_owner(settings, count))
    finally:
        loop.close()
