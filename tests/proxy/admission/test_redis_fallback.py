"""RedisBuckets when Redis does not answer: local buckets at limit // pods within a few ms,
one log line per transition, counted in ``metrics``, and back to Redis when it answers."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from bucket_helpers import redis_buckets

from infra.process import free_port
from proxy.limits import BackendError, BucketSpec
from proxy.limits.redis_buckets import RedisBuckets

T0 = 1_700_000_000_000_000
LOGGER = "proxy.limits"


def transitions(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]


async def timed(coro):
    start = time.perf_counter()
    result = await coro
    return result, time.perf_counter() - start


async def wait_for_redis_mode(buckets: RedisBuckets, spec: BucketSpec, deadline_s: float = 3.0) -> None:
    """Keep calling (as traffic would) until a probe after the backoff finds Redis again."""
    deadline = time.monotonic() + deadline_s
    while buckets.metrics["mode"] != "redis":
        assert time.monotonic() < deadline, f"never went back to Redis: {buckets.metrics}"
        await buckets.peek(spec, T0)
        await asyncio.sleep(0.005)


async def test_dead_port_answers_locally_at_capacity_over_pods(caplog):
    caplog.set_level(logging.WARNING, LOGGER)
    buckets = RedisBuckets.from_url(f"redis://127.0.0.1:{free_port()}/0", pods=4, timeout_s=0.005)
    try:
        spec = BucketSpec("dead", 100)
        answers = [await timed(buckets.reserve([(spec, 1)], T0)) for _ in range(40)]
        assert sum(r.ok for r, _ in answers) == 25  # 100 // 4 pods
        assert max(elapsed for _, elapsed in answers) < 0.05
        assert buckets.metrics["mode"] == "local"
        assert buckets.metrics["redis_fallback_total"] == 40
        assert buckets.metrics["redis_errors_total"] >= 1
        assert buckets.metrics["redis_outages_total"] == 1
        [line] = transitions(caplog)
        assert "unreachable" in line and "limit/4" in line

    finally:
        await buckets.close()

async def test_start_warms_up_or_starts_local(caplog):
    caplog.set_level(logging.WARNING, LOGGER)
    buckets = RedisBuckets.from_url(f"redis://127.0.0.1:{free_port()}/0", pods=2)
    try:
        await buckets.start()
        assert buckets.metrics["mode"] == "local" and len(transitions(caplog)) == 1
        assert await buckets.peek(BucketSpec("k", 10), T0) == 5
    finally:
        await buckets.close()


async def test_a_paused_redis_times_out_in_ms_then_is_used_again(make_redis_server, caplog):
    caplog.set_level(logging.WARNING, LOGGER)
    server = make_redis_server()
    buckets = redis_buckets(server, pods=2, timeout_s=0.005, backoff_s=0.02)
    spec = BucketSpec("paused", 100)
    await buckets.start()
    try:
        assert (await buckets.reserve([(spec, 10)], T0)).remaining == {"paused": 90}
        server.pause()
        during = [await timed(buckets.reserve([(spec, 1)], T0)) for _ in range(60)]
        # the first call waits out the 5 ms timeout; the rest answer at once from local buckets
        assert max(elapsed for _, elapsed in during) < 0.03
        assert sorted(elapsed for _, elapsed in during)[30] < 0.002
        assert sum(r.ok for r, _ in during) == 50  # 100 // 2 pods, local and fresh
        assert buckets.metrics["mode"] == "local" and buckets.metrics["redis_fallback_total"] == 60
        assert len(transitions(caplog)) == 1

        server.resume()
        await wait_for_redis_mode(buckets, spec)
        assert len(transitions(caplog)) == 2 and "answers again" in transitions(caplog)[1]
        got = await buckets.reserve([(spec, 5)], T0)
        assert got.ok and buckets.metrics["mode"] == "redis"
        # shared state again (90 - 5; a timed-out script may also have run late: safe side)
        assert got.remaining["paused"] <= 85
    finally:
        server.resume()
        await buckets.close()


async def test_concurrent_calls_during_an_outage_log_once(make_redis_server, caplog):
    caplog.set_level(logging.WARNING, LOGGER)
    server = make_redis_server()
    buckets = redis_buckets(server, pods=3, timeout_s=0.005, backoff_s=10.0)
    spec = BucketSpec("burst", 300)
    await buckets.start()
    try:
        await buckets.peek(spec, T0)
        server.pause()
        start = time.perf_counter()
        results = await asyncio.gather(*(buckets.reserve([(spec, 1)], T0) for _ in range(200)))
        # every call was in flight before the first timeout; each waits ~5 ms plus loop time
        # (opening pool connections to a paused server), never Redis's socket timeout
        assert time.perf_counter() - start < 0.5
        assert sum(r.ok for r in results) == 100  # 300 // 3
        assert len(transitions(caplog)) == 1
        assert buckets.metrics["redis_outages_total"] == 1
    finally:
        server.resume()
        await buckets.close()


async def test_a_restarted_redis_is_used_again_and_scripts_reloaded(make_redis_server, caplog):
    caplog.set_level(logging.WARNING, LOGGER)
    server = make_redis_server()
    buckets = redis_buckets(server, pods=2, timeout_s=0.005, backoff_s=0.02)
    spec = BucketSpec("restart", 100)
    await buckets.start()
    try:
        await buckets.reserve([(spec, 10)], T0)
        server.stop()
        assert (await buckets.reserve([(spec, 60)], T0)).ok is False  # local: 50 per pod
        assert buckets.metrics["mode"] == "local"
        server.start()  # same port, empty, no scripts loaded: NOSCRIPT -> SCRIPT LOAD
        await wait_for_redis_mode(buckets, spec)
        got = await buckets.reserve([(spec, 60)], T0)
        assert got.ok and got.remaining == {"restart": 40}  # a fresh shared bucket
        assert await buckets.state("restart") is not None
        assert len(transitions(caplog)) == 2
    finally:
        await buckets.close()


async def test_a_redis_error_that_is_not_an_outage_is_raised(redis_server):
    buckets = redis_buckets(redis_server, timeout_s=0.5)
    try:
        await buckets.client.set(buckets.redis_key("wrongtype"), "x")
        with pytest.raises(BackendError):
            await buckets.reserve([(BucketSpec("wrongtype", 10), 1)], T0)
        assert buckets.metrics["mode"] == "redis" and buckets.metrics["redis_fallback_total"] == 0
    finally:
        await buckets.close()
