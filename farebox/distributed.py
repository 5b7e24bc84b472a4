"""Wiring the distributed mode: a gateway pod over Kafka (events), Redis (rate limits, grants) and leases.

Start-up: refuse an aiokafka version whose internals were not tested
(``streams.kafka.internals``), before any connection; the config snapshot as in embedded mode; the Kafka event log (its
disk spool under ``distributed.spool_dir/<pod>``); Redis buckets shared by
the pods; the wallets, fed by grants the worker publishes on
``fb:grants:<pod>`` (and polled, in case a publish is missed). Shutdown
(reverse): stop the grant listener, let requests finish, return every lease,
close the upstream session, close the event log (flushes; what Kafka did not
take stays in the spool for the next start).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable

import orjson
import redis.asyncio as aioredis
from aiohttp import web

from farebox.config_topic import attach_config_topic, config_topic_ctx
from farebox.pod import ArchiveRerater, build_runtime, serve_pod, start_pod
from farebox.settings import Settings
from farebox.usage import attach_usage
from ledger.codec import from_dict
from ledger.events import LeaseGranted
from proxy.admission.budget_port import budget_period
from proxy.admission.lease_budgets import LeaseBudgets
from proxy.admission.scope_states import ScopeStates
from proxy.admission.wallet import WalletPolicy, Wallets
from proxy.cache.redis_cache import RedisCache
from proxy.cache.vector_redis import RedisVectors
from proxy.cancellation import stop_if_cancelled
from proxy.control.follow import follow_ctx
from proxy.control.service import ControlService
from proxy.idempotency.redis_store import RedisIdempotency
from proxy.limits.redis_buckets import RedisBuckets
from proxy.metering.recorder import Recorder
from proxy.observe.metrics import Metrics
from proxy.routing.breaker_sync import sync_ctx as breaker_sync_ctx
from proxy.routing.wait_sync import sync_ctx as wait_sync_ctx
from proxy.runtime import PodState
from proxy.snapshot import Secrets, Snapshot
from proxy.stored_responses.redis_store import RedisResponses
from streams.kafka.internals import GATEWAY_LIBRARIES, UntestedVersions, check_versions, installed_version
from streams.kafka.log import KafkaEventLog
from streams.projections import RedisProjections

log = logging.getLogger("farebox")


def check_gateway_versions(version_of: Callable[[str], str | None] = installed_version) -> None:
    """Exit with a clear message when aiokafka, whose internals the pod's Kafka event log uses, is untested."""
    try:
        check_versions(version_of, libraries=GATEWAY_LIBRARIES, who="a distributed gateway pod")
    except UntestedVersions as exc:
        raise SystemExit(f"error: {exc}") from None


async def distributed_gateway_app(settings: Settings, secrets: Secrets | None = None) -> web.Application:
    check_gateway_versions()  # before any connection
    d = settings.distributed
    start = await start_pod(settings, secrets)
    db, follower, snapshot, secrets = start.db, start.follower, start.snapshot, start.secrets
    events = KafkaEventLog(d.bootstrap, Path(d.spool_dir) / settings.pod_id, requests_topic=d.requests_topic,
                           scope_topic=d.scope_topic, config_topic=d.config_topic,
                           spool_after_s=d.spool_after_s, client_id=f"farebox-{settings.pod_id}")
    recorder = Recorder(events, Metrics())  # the worker projects the ledger; this pod keeps none
    limits = RedisBuckets.from_url(d.redis_url, pods=d.pods, timeout_s=d.limits_timeout_ms / 1000)
    idempotency = RedisIdempotency.from_url(d.redis_url)  # Idempotency-Key records shared by every pod
    cache = RedisCache.from_url(d.redis_url)  # the response cache, shared by every pod
    vectors = RedisVectors.from_url(d.redis_url, max_per_namespace=settings.cache.semantic_max_per_namespace)
    clock = time.time
    wallets = Wallets(settings.pod_id, recorder.emit, lambda: datetime.fromtimestamp(clock(), timezone.utc),
                      WalletPolicy(lease_wait_s=d.lease_wait_s, low_water_pct=d.low_water_pct,
                                   emergency_micro=d.emergency_micro),
                      kafka_up=lambda: events.mode in ("direct", "connecting"),
                      observe_rtt=recorder.metrics.lease_round_trip_seconds.observe)
    # -- config topic (farebox/config_topic.py): the control service tells it about every change --
    publisher = attach_config_topic(follower, settings)
    control = None if db is None else ControlService(
        db, price_change_factor=settings.price_change_factor, publisher=publisher, adopt=follower.adopt,
        status=follower.status, secret_hosts=settings.secret_hosts,
        approve_budgets_above_micro=settings.approve_budgets_above_micro)
    pod = PodState(snapshot)
    redis = aioredis.Redis.from_url(d.redis_url)
    budgets = LeaseBudgets(wallets, settings.hold_ttl_s, read_scope=RedisProjections(redis).read_scope)
    runtime = build_runtime(settings, secrets, pod, recorder=recorder, budgets=budgets, limits=limits, control=control,
                            idempotency=idempotency, cache=cache, vectors=vectors,
                            responses=RedisResponses.from_url(d.redis_url),
                            rerater=ArchiveRerater(settings))
    state = recorder.metrics.state  # read at scrape time
    state.spool_bytes = lambda: events.spooled_bytes
    state.lease_grants, state.lease_returns = lambda: wallets.stats["granted"], lambda: wallets.stats["returned"]
    budget_use: list[tuple[str, int, int, int]] = []  # refreshed from the worker's projection by _follow_budgets
    state.budget_use = lambda: budget_use
    app = serve_pod(start, runtime, recorder)
    attach_usage(app, settings.archive_root, state=state)  # the archiver consumer (`farebox archiver`) keeps this archive

    async def event_log_ctx(app: web.Application) -> AsyncIterator[None]:
        await limits.start()
        yield
        await _step("closing the Redis buckets", limits.close(), 10.0)
        await _step("closing the idempotency store", idempotency.close(), 10.0)
        await _step("closing the response cache", cache.close(), 10.0)
        await _step("closing the semantic cache", vectors.close(), 10.0)
        await _step("flushing and closing the event log", events.close(), None)  # never cut: the money is in it
        if events.spooled_bytes:  # Kafka was away at the end: these events (lease returns too) wait for a restart
            log.warning("shutdown: %d bytes of events left in the spool %s; they go to Kafka when this pod "
                        "starts again", events.spooled_bytes, Path(d.spool_dir) / settings.pod_id)

    async def wallet_ctx(app: web.Application) -> AsyncIterator[None]:
        tasks = [asyncio.create_task(_listen(redis, settings.pod_id, wallets)),
                 asyncio.create_task(_poll(redis, wallets)), asyncio.create_task(_sweep(wallets)),
                 asyncio.create_task(_follow_scopes(redis, wallets.states)),
                 asyncio.create_task(_follow_budgets(redis, lambda: pod.snapshot, budget_use))]
        yield
        for task in tasks:
            task.cancel()
        await _step("stopping the grant listener and pollers", asyncio.gather(*tasks, return_exceptions=True), 10.0)
        returned, micro = wallets.close()  # requests have finished: give back every unspent slice
        log.info("shutdown: returned %d lease(s) (%d micro) to the ledger; over this pod's life %d granted, "
                 "%d returned", returned, micro, wallets.stats["granted"], wallets.stats["returned"])
        await _step("closing the Redis connection", redis.aclose(), 10.0)

    app.cleanup_ctx.insert(0, event_log_ctx)
    app.cleanup_ctx.insert(1, wallet_ctx)
    app.cleanup_ctx.append(functools.partial(follow_ctx, follower=follower, emit=recorder.emit, db=db))
    app.cleanup_ctx.append(functools.partial(config_topic_ctx, follower=follower))
    if d.share_breakers:  # shared circuit breakers (proxy/routing/breaker_sync.py)
        app.cleanup_ctx.append(breaker_sync_ctx(d.redis_url, runtime.routing, lambda: pod.snapshot.deployments,
                                                settings.pod_id, d.breaker_probe_grace_s))
    if d.share_wait_rooms:  # teams waiting for capacity take it in turn across pods (proxy/routing/wait_sync.py)
        app.cleanup_ctx.append(wait_sync_ctx(d.redis_url, runtime.routing, settings.pod_id))
    return app


async def _step(what: str, work: Awaitable[object], timeout_s: float | None) -> None:
    """One shutdown step, logged with its duration; a step that may be cut is abandoned after ``timeout_s``.

    Only steps that hold no money are given a timeout: what they would have
    done (closing connections, ending listeners) the process exit does too.
    """
    started = time.monotonic()
    task = asyncio.ensure_future(work)
    # asyncio.wait, not wait_for: wait_for waits for the cancelled work to end, forever if it ignores the cancel
    done, _ = await asyncio.wait({task}, timeout=timeout_s)
    if not done:
        task.cancel()
        log.warning("shutdown: %s took longer than %.0fs; left to the process exit", what, timeout_s)
        return
    await task  # its error, if any, is the step's
    took = time.monotonic() - started
    (log.warning if took > 2.0 else log.debug)("shutdown: %s took %.2fs", what, took)


def _grant(body: bytes | str) -> LeaseGranted | None:
    event = from_dict(orjson.loads(body))
    return event if isinstance(event, LeaseGranted) else None


async def _listen(redis: aioredis.Redis, pod: str, wallets: Wallets) -> None:
    """Grants published for this pod, applied as they arrive; reconnects when Redis drops."""
    while True:
        try:
            async with redis.pubsub() as pubsub:
                await pubsub.subscribe(f"fb:grants:{pod}")
                stop_if_cancelled()
                # get_message, not listen(): a cancel redis-py swallows inside listen() is never seen
                while True:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                    stop_if_cancelled()
                    if message and message.get("type") == "message" and (granted := _grant(message["data"])):
                        wallets.on_grant(granted)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - Redis went away: the poll still finds grants
            stop_if_cancelled()
            log.warning("grant listener lost Redis; retrying", exc_info=True)
            await asyncio.sleep(0.5)


async def _poll(redis: aioredis.Redis, wallets: Wallets, interval_s: float = 0.25) -> None:
    """A publish sent before we subscribed is lost: look for the grants still awaited."""
    while True:
        await asyncio.sleep(interval_s)
        for ask in list(wallets.asked.values()):
            try:
                body = await redis.get(f"fb:lease:{ask.lease_id}")
            except Exception:  # noqa: BLE001
                stop_if_cancelled()
                break
            stop_if_cancelled()
            if body and (granted := _grant(body)) is not None:
                wallets.on_grant(granted)


async def _follow_scopes(redis: aioredis.Redis, states: ScopeStates, interval_s: float = 0.2) -> None:
    """Read the worker's projection of the scopes this pod's requests touch (one pipelined round trip)."""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(interval_s)
        scopes = states.wanted(loop.time())
        if not scopes:
            continue
        try:
            pipe = redis.pipeline(transaction=False)
            for scope in scopes:
                pipe.hgetall(f"fb:scope:{scope}")
            rows = await pipe.execute()
        except Exception:  # noqa: BLE001 - Redis away: readings go stale and are ignored
            stop_if_cancelled()
            continue
        stop_if_cancelled()
        states.update({scope: {k.decode(): v.decode() for k, v in row.items()} for scope, row in zip(scopes, rows)},
                      loop.time())


async def _follow_budgets(redis: aioredis.Redis, snapshot: Callable[[], Snapshot], out: list,
                          interval_s: float = 5.0) -> None:
    """For /metrics: this month's settled + held of each limited team and business unit, from the worker's
    projection (one pipelined read every ``interval_s``); a row of an earlier month counts as nothing spent."""
    while True:
        snap = snapshot()
        limits = [(scope, lim) for scope, lim in snap.budgets.scopes.items()
                  if lim.limit_micro is not None and scope.startswith(("team:", "bu:"))]
        try:
            pipe = redis.pipeline(transaction=False)
            for scope, _ in limits:
                pipe.hgetall(f"fb:scope:{scope}")
            rows = await pipe.execute()
        except Exception:  # noqa: BLE001 - Redis away: keep the last reading
            rows = None
        stop_if_cancelled()
        if rows is not None:
            period = budget_period(snap, time.time())
            out[:] = [(scope, int(row.get(b"settled", 0)) + int(row.get(b"held", 0))
                       if row.get(b"period", b"").decode() == period else 0, lim.limit_micro, lim.soft_pct)
                      for (scope, lim), row in zip(limits, rows)]
        await asyncio.sleep(interval_s)


async def _sweep(wallets: Wallets, interval_s: float = 1.0) -> None:
    while True:
        await asyncio.sleep(interval_s)
        wallets.sweep()
