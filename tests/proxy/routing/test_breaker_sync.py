"""Breakers shared through a real Redis: one pod's open reaches another, a late pod learns it, Redis down is harmless."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from infra.redis.server import RedisServer
from proxy.control.declarative import CONTROL_SECTIONS, compile_snapshot
from proxy.outcomes import FAILED, OK
from proxy.routing.breaker import CLOSED, OPEN
from proxy.routing.breaker_sync import BreakerSync
from proxy.routing.state import RoutingState
from proxy.snapshot import Snapshot
from tests.harness import start_redis

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "farebox.yaml"
DEP = "sim-openai-mumbai"


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = start_redis()
    yield server
    server.cleanup()


def snapshot(cooldown_s: float = 60) -> Snapshot:
    """The example config; long cooldowns so a slow machine never sees an open end mid-test."""
    tree = {k: v for k, v in yaml.safe_load(EXAMPLE.read_text()).items() if k in CONTROL_SECTIONS}
    for d in tree["deployments"]:
        d.setdefault("breaker", {}).update(cooldown_s=cooldown_s, max_cooldown_s=cooldown_s * 4)
    snap = compile_snapshot(tree, ())
    assert snap is not None
    return snap


def pod(redis_server: RedisServer, snap: Snapshot, name: str) -> tuple[RoutingState, BreakerSync]:
    state = RoutingState()
    sync = BreakerSync(redis_server.url, state, lambda: snap.deployments, name, interval_s=0.05, retry_s=0.1)
    return state, sync


def fail_until_open(state: RoutingState, snap: Snapshot) -> None:
    dep = snap.deployments[DEP]
    while state.breaker(dep).state != OPEN:
        assert state.start(dep, state.clock())
        state.finish(dep, FAILED, state.clock())


async def until(predicate, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not reached in {timeout_s}s"
        await asyncio.sleep(0.02)


async def test_an_open_reaches_the_other_pods_and_a_late_pod_and_a_close_follows(redis_server) -> None:
    snap = snapshot()
    dep = snap.deployments[DEP]
    (a, sync_a), (b, sync_b) = pod(redis_server, snap, "pod-a"), pod(redis_server, snap, "pod-b")
    sync_a.start()
    sync_b.start()
    try:
        await until(lambda: sync_b.status()["redis"] == "ok" and sync_b._tasks, 10, "pod b subscribed")  # noqa: SLF001
        await asyncio.sleep(0.2)  # let the subscription settle before the first publish
        fail_until_open(a, snap)
        opened_at = time.monotonic()
        await until(lambda: b.blocked(dep, b.clock()) == "circuit_open", 20, "pod b skips the deployment")
        print(f"\n  open on pod a -> skipped on pod b: {(time.monotonic() - opened_at) * 1000:.0f} ms")
        # b may hear the publish before a's pipeline call returns and counts it: wait for a's count
        await until(lambda: sync_a.sent >= 1, 20, "pod a counts its notice")
        assert sync_a.sent == 1 and sync_b.applied == 1
        assert b.breaker(dep).open_until - b.clock() <= a.breaker(dep).open_until - a.clock() + 0.01

        c, sync_c = pod(redis_server, snap, "pod-c")  # starts after the open: reads the key
        sync_c.start()
        try:
            await until(lambda: c.blocked(dep, c.clock()) == "circuit_open", 20, "pod c learns the open")
            # a's probes close the circuit: b and c close too, neither tells anything back
            breaker = a.breaker(dep)
            breaker.open_until = a.clock()  # the cooldown is over (skip the wait)
            for _ in range(dep.breaker.close_after):
                assert a.start(dep, a.clock())
                a.finish(dep, OK, a.clock())
            assert breaker.state == CLOSED
            await until(lambda: b.breaker(dep).state == CLOSED and c.breaker(dep).state == CLOSED, 20,
                        "the close reaches b and c")
            await asyncio.sleep(0.2)
            assert (sync_b.sent, sync_c.sent, sync_a.sent) == (0, 0, 2)
        finally:
            await sync_c.close()
    finally:
        await sync_a.close()
        await sync_b.close()


async def test_redis_down_keeps_local_breakers_and_the_open_is_told_when_it_is_back(redis_server) -> None:
    snap = snapshot()
    dep = snap.deployments[DEP]
    a, sync_a = pod(redis_server, snap, "pod-a")
    sync_a.start()
    try:
        await asyncio.to_thread(redis_server.stop)
        fail_until_open(a, snap)  # the request path never touches Redis
        assert a.blocked(dep, a.clock()) == "circuit_open"
        await until(lambda: sync_a.status()["redis"] == "unreachable" and sync_a.status()["pending"] == 1, 20,
                    "the open kept while Redis is away")
        await asyncio.to_thread(redis_server.start)
        await until(lambda: sync_a.status()["pending"] == 0, 20, "the pending open written")
        b, sync_b = pod(redis_server, snap, "pod-b")
        sync_b.start()
        try:
            await until(lambda: b.blocked(dep, b.clock()) == "circuit_open", 20, "pod b learns the open")
        finally:
            await sync_b.close()
    finally:
        await sync_a.close()
