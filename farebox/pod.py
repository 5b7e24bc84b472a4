"""What a gateway pod builds the same way in every mode: its config, options and runtime, and its app.

Every mode's wiring (``farebox.wiring`` embedded, ``farebox.local_pod`` a ``--workers`` gateway process,
``farebox.distributed``) runs the same two steps around what is its own (the event log, budgets, limits):

1. ``start_pod``: the config database opened (migrated; seeded on a first start) or, when it is down,
   None; the snapshot follower; the first snapshot (the database's head, else the last good on disk);
   the provider secrets;
2. ``serve_pod``: the follower swapped into the pod and recording through its recorder; the app with the
   admin API and the web page mounted, tracing, the body log.

No mode's wiring imports another's.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from aiohttp import web

from farebox.config_topic import follower_of
from farebox.control import open_config_db
from farebox.internal_socket import internal_socket
from farebox.observe import build_tracing, tracing_ctx
from farebox.secrets import load_secrets
from farebox.settings import Settings
from ledger.events import Event
from pricing.book import FxTable, PriceBook
from proxy.admission.budget_port import BudgetPort
from proxy.api.app import Tracer, create_app
from proxy.batches.canary import LEVEL, Canary, probes
from proxy.batches.provider_run import ProviderRuns
from proxy.batches.reserve_run import Releases
from proxy.batches.runner import Runner
from proxy.batches.sql_store import SqlBatches
from proxy.bodylog import BodyLog, BodyStore, TeamCipher
from proxy.cache import CachePort, MemoryCache, MemoryVectors, VectorStore
from proxy.control import admin, ui
from proxy.control.db.store import ConfigDB
from proxy.control.document import load_last_good
from proxy.control.errors import ControlUnavailable
from proxy.control.follow import SnapshotFollower
from proxy.control.problems import ConfigError
from proxy.control.rollout_runner import RolloutRunner
from proxy.idempotency import IdempotencyStore, MemoryIdempotency
from proxy.idempotency.sqlite_store import SqliteIdempotency
from proxy.limits import Buckets
from proxy.metering.recorder import Recorder
from proxy.ports import Append, ControlStore, Rerater, RerateRefused
from proxy.runtime import PodState, ProxyOptions, Runtime
from proxy.snapshot import Secrets, Snapshot
from proxy.stored_responses import ResponseStore, store_at
from proxy.stored_responses.behind import WriteBehind
from proxy.upstream.relay import UpstreamClient
from reconcile.rerate.service import Rerating
from streams.archive.pending import unarchived_corrections

log = logging.getLogger("farebox")


def options_of(settings: Settings) -> ProxyOptions:
    return ProxyOptions(
        pod_id=settings.pod_id, max_body_bytes=settings.max_body_bytes, hold_ttl_s=settings.hold_ttl_s,
        max_in_flight=settings.max_in_flight, overload=settings.overload, drain_timeout_s=settings.drain_timeout_s,
        auth_failures_per_minute=settings.auth_failures_per_minute, metrics_token=settings.metrics_token,
        idempotency_ttl_s=settings.idempotency_ttl_s,
        idempotency_max_answer_bytes=settings.idempotency_max_answer_bytes,
        budget_wait_s=settings.budget_wait_s, budget_wait_max_s=settings.budget_wait_max_s,
        cache_ttl_s=settings.cache.ttl_s, cache_max_temperature=settings.cache.max_temperature,
        cache_max_entry_bytes=settings.cache.max_entry_bytes,
        stored_responses_ttl_s=settings.stored_responses.ttl_s,
        stored_responses_max_bytes=settings.stored_responses.max_record_bytes,
        batch_max_file_bytes=settings.batches.max_file_bytes, batch_max_lines=settings.batches.max_lines,
        batch_reserve_pct=settings.batches.reserve_pct, batch_cpu_ceiling=settings.batches.cpu_ceiling,
        batch_cpu_ceiling_beside=settings.batches.cpu_ceiling_beside,
        canary_team=settings.canary.team,
    )


def local_idempotency(settings: Settings) -> IdempotencyStore:
    """One machine's idempotency store (``server.idempotency_store``): on disk under ``state_dir``, or in memory."""
    s = settings.idempotency_store
    if s.store == "memory":
        return MemoryIdempotency(max_bytes=s.memory_bytes)
    return SqliteIdempotency(settings.state_dir / "idempotency.sqlite", max_bytes=s.disk_bytes)


def build_runtime(settings: Settings, secrets: Secrets, pod: PodState, *, recorder: Recorder, budgets: BudgetPort,
                  limits: Buckets, control: ControlStore | None,
                  idempotency: IdempotencyStore | None = None, cache: CachePort | None = None,
                  vectors: VectorStore | None = None, rerater: Rerater | None = None,
                  responses: ResponseStore | None = None, responses_shared: bool = True) -> Runtime:
    """The pod's runtime, once, with one adapter per port (idempotency and caches: in-process unless given;
    stored responses: the store at ``stored_responses.url`` unless given, written behind the answers;
    ``responses_shared``: other processes read the same store, so a miss waits for their writes)."""
    c = settings.cache
    return Runtime(pod=pod, secrets=secrets, options=options_of(settings), recorder=recorder, budgets=budgets,
                   limits=limits, upstream=UpstreamClient(secrets), control=control, rng=random.Random(),
                   idempotency=idempotency or local_idempotency(settings),
                   cache=cache or MemoryCache(max_entries=c.max_entries, max_bytes=c.max_bytes),
                   vectors=vectors or MemoryVectors(max_entries=c.semantic_max_entries, max_bytes=c.semantic_max_bytes,
                                                    max_per_namespace=c.semantic_max_per_namespace),
                   responses=WriteBehind(responses or store_at(settings.stored_responses.url,
                                                                only_writer=not responses_shared),
                                         miss_wait_s=1.0 if responses_shared else 0.0,
                                         on_failure=lambda reason: recorder.metrics.responses_not_stored.labels(
                                             reason).inc()),
                   body_log=body_log_of(settings), rerater=rerater, batches=SqlBatches(settings.batches.url))


def body_log_of(settings: Settings) -> BodyLog | None:
    """The encrypted body log, when its master key is configured (its store opens here)."""
    b = settings.body_log
    if b.master_key is None:
        return None
    return BodyLog(BodyStore(b.url), TeamCipher(b.master_key), retention_s=b.retention_days * 86_400,
                   sweep_s=b.sweep_interval_s)


async def body_log_ctx(app: web.Application, runtime: Runtime) -> AsyncIterator[None]:
    """Flush and sweep the body log while the app runs; write what is queued on shutdown."""
    body_log = runtime.body_log
    if body_log is None:
        yield
        return
    task = asyncio.create_task(body_log.run())
    yield
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await body_log.close()


async def stored_responses_ctx(app: web.Application, runtime: Runtime) -> AsyncIterator[None]:
    """Close the stored-response store once requests have finished."""
    yield
    await runtime.responses.close()


async def batch_runner_ctx(app: web.Application, runtime: Runtime, settings: Settings) -> AsyncIterator[None]:
    """This process's batch runner (``proxy.batches.runner``), sending lines to its own private socket; on
    shutdown it claims nothing more and lets the lines in flight finish, then the store closes."""
    if runtime.batches is None:
        yield
        return
    b = settings.batches
    m = runtime.metrics

    def gauges(queued: int, running: int) -> None:
        m.batch_queued.set(queued)
        m.batch_running.set(running)

    runner_id = f"{settings.pod_id}:{os.getpid()}"
    provider = ProviderRuns(runtime.batches, runner_id, lambda: runtime.upstream.session, runtime,  # type: ignore[arg-type]
                            poll_s=b.provider_poll_s) if runtime.options.provider_batches else None
    runner = Runner(runtime.batches, str(internal_socket()), runner_id,
                    concurrency=b.concurrency, claim_s=b.claim_s, provider=provider,
                    may_claim=lambda: not runtime.pod.shedder.busy_for_batch(runtime.pod.batch_ceiling(runtime.options)),
                    observe=lambda outcome: (m.shadow_legs.labels(outcome.removeprefix("shadow_"))
                                             if outcome.startswith("shadow_") else m.batch_lines.labels(outcome)).inc(),
                    gauges=gauges, release_holds=Releases(runtime, runtime.batches))
    runtime.pod.batch_token, runtime.pod.wake_batches = runner.token, runner.wake
    runtime.pod.send_shadow = runner.send_shadow
    task = asyncio.get_running_loop().create_task(runner.run(), name="batch-runner")
    probing = None
    if settings.canary.enabled:
        c = settings.canary
        canary = Canary(c.interval_s, c.timeout_s,
                        lambda: probes(runtime.snapshot.aliases, runtime.snapshot.deployments), runner.post_canary,
                        on_status=lambda dep, status: m.deployment_up.labels(dep).set(LEVEL[status.status]))
        runtime.pod.deployment_status = canary.statuses
        probing = asyncio.get_running_loop().create_task(canary.run(), name="canary")
    yield
    if probing is not None:
        probing.cancel()
        await asyncio.gather(probing, return_exceptions=True)
    await runner.stop(settings.drain_timeout_s)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await runtime.batches.close()


def first_snapshot(settings: Settings, follower: SnapshotFollower) -> Snapshot:
    """From the config database; if it is unreachable, from the last good snapshot on local disk."""
    if follower.db is not None:
        try:
            head = follower.db.head()
            if head is not None:
                return follower.adopt_sync(head[0], follower.db.document(head[0]), "database")
        except ControlUnavailable:
            follower.db_ok = False
    saved = load_last_good(settings.state_dir)
    if saved is None:
        raise ConfigError([f"the config database ({settings.safe_db_url}) is unreachable and there is no last good "
                           f"snapshot in {settings.state_dir}"], str(settings.config_path))
    log.warning("config database unreachable: serving the last good snapshot %d from disk", saved[0])
    return follower.adopt_sync(saved[0], saved[1], "disk")


def pod_app(runtime: Runtime, tracing: Tracer | None = None, **kw: object) -> web.Application:
    """The pod's aiohttp app: the model API, with the admin API and the web page mounted beside it."""
    return create_app(runtime, tracing=tracing, mounts=(admin, ui), open_prefixes=(ui.PREFIX,), **kw)  # type: ignore[arg-type]


@dataclass(slots=True)
class PodStart:
    """A pod's config as it starts: the database (None: unreachable), its follower, the first snapshot."""

    settings: Settings
    db: ConfigDB | None
    follower: SnapshotFollower
    snapshot: Snapshot
    secrets: Secrets


async def start_pod(settings: Settings, secrets: Secrets | None = None) -> PodStart:
    """Step 1 of every mode's start (module docstring); ``secrets`` given: not read from the environment."""
    try:
        db = await asyncio.to_thread(open_config_db, settings)
    except ControlUnavailable:
        db = None
        log.warning("config database %s unreachable at start-up", settings.safe_db_url)
    holder: list[Snapshot] = []
    follower = follower_of(settings, db, holder.append, secrets or Secrets())
    snapshot = await asyncio.to_thread(first_snapshot, settings, follower)
    if secrets is None:
        secrets = load_secrets(settings, snapshot=snapshot)
        follower.secrets = secrets
    return PodStart(settings, db, follower, snapshot, secrets)


def serve_pod(start: PodStart, runtime: Runtime, recorder: Recorder) -> web.Application:
    """Step 2: the follower feeds the pod, the app is built; the mode adds its own cleanup steps after."""
    start.follower.swap, start.follower.emit = runtime.pod.swap, recorder.emit
    tracing = build_tracing(start.settings.observability.tracing, recorder.metrics)
    app = pod_app(runtime, tracing=tracing)
    app.cleanup_ctx.append(tracing_ctx(tracing))
    app.cleanup_ctx.append(functools.partial(body_log_ctx, runtime=runtime))
    app.cleanup_ctx.append(functools.partial(stored_responses_ctx, runtime=runtime))
    app.cleanup_ctx.append(functools.partial(batch_runner_ctx, runtime=runtime, settings=start.settings))
    app.cleanup_ctx.append(functools.partial(rollout_ctx, runtime=runtime, db=start.db, settings=start.settings,
                                             follower=start.follower))
    return app


async def rollout_ctx(app: web.Application, runtime: Runtime, db: ConfigDB | None, settings: Settings,
                      follower: SnapshotFollower) -> AsyncIterator[None]:
    """This process's part in config canaries (``proxy.control.rollout_runner``): none without a config database."""
    if db is None:
        yield
        return
    runner = RolloutRunner(db, runtime.pod, f"{settings.pod_id}:{os.getpid()}", runtime.recorder.emit,
                           runtime.metrics)
    runtime.pod.rollout_runner = runner
    follower.prepare = runner.prepare
    task = asyncio.get_running_loop().create_task(runner.run(), name="rollout-runner")
    yield
    follower.prepare = None
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    try:
        await runner.flush()  # the last requests' figures
    except Exception:  # noqa: BLE001 - the database gone at shutdown: logged, nothing else to do
        log.warning("could not write the last config canary figures at shutdown")


class ArchiveRerater:
    """``proxy.ports.Rerater`` over ``reconcile``'s re-rating of the pod's archive (``reconcile.rerate.service``)."""

    def __init__(self, settings: Settings) -> None:
        log_path = settings.event_log_path if settings.mode == "embedded" else None
        archive = settings.archive_root
        self.rerating = Rerating(archive, lambda: unarchived_corrections(log_path, archive))

    async def rerate(self, start: date, end: date, book: PriceBook, fx: FxTable, version: int, *, now: datetime,
                     reason: str, append: Append | None) -> tuple[dict[str, Any], list[Event]]:
        from reconcile.rerate.reprice import RerateError

        try:
            return await self.rerating.rerate(start, end, book, fx, version, now=now, reason=reason, append=append)
        except RerateError as exc:
            raise RerateRefused(str(exc), exc.field) from None
