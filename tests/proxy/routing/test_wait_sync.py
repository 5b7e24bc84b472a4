"""Wait rooms shared through a real Redis: a team waiting on one pod holds back a team served more on another,
a pod's entry goes when its waiters do (or, if it dies, when the entry expires), Redis down leaves each pod
fair on its own."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from infra.redis.server import RedisServer
from proxy.routing.state import RoutingState
from proxy.routing.wait_sync import WaitSync, decode, encode, merge
from tests.harness import start_redis

ALIAS = "chat-one-seat"


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = start_redis()
    yield server
    server.cleanup()


def test_entries_round_trip_and_sum_per_team() -> None:
    state = RoutingState()
    room = state.wait_room(ALIAS)
    first, second = room.join("big"), room.join("big")
    room.leave("big", first, served=True)
    state.wait_room("idle")  # a room nobody waits in is not told
    raw = encode(state.waits)
    assert raw is not None and decode(raw) == {ALIAS: {"big": (1, 1, second[0])}}
    assert merge([{ALIAS: {"big": (1, 1, 7.0)}}, {ALIAS: {"big": (2, 0, 5.0), "lone": (1, 0, 9.0)}},
                  {"x": {"t": (1, 2, 1.0)}}]) == {ALIAS: {"big": (3, 1, 5.0), "lone": (1, 0, 9.0)}, "x": {"t": (1, 2, 1.0)}}
    assert decode(b"not json") is None and decode(b'{"a": 3}') is None and decode(None) is None
    assert decode(b'{"a": {"t": [1, 2]}}') is None  # an entry of the format before the oldest wait
    room.leave("big", second, served=False)
    assert encode(state.waits) is None


async def _until(check, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "not reached"
        await asyncio.sleep(0.01)


def test_two_pods_share_their_rooms(redis_server: RedisServer) -> None:
    async def scenario() -> None:
        prefix = f"t:{uuid.uuid4().hex[:8]}:"
        one, two = RoutingState(), RoutingState()
        syncs = [WaitSync(redis_server.url, state, pod, prefix=prefix, interval_s=0.02)
                 for state, pod in ((one, "pod-1"), (two, "pod-2"))]
        for s in syncs:
            s.start()
        try:
            big = one.wait_room(ALIAS)
            tickets = [big.join("big") for _ in range(4)]
            big.leave("big", tickets[0], served=True)  # big has had a turn on pod 1
            assert big.may_try("big", tickets[1])  # alone as far as pod 1 knows
            lone = two.wait_room(ALIAS)
            await _until(lambda: "big" in lone.remote)  # pod 2 reads the others while nobody waits there too
            mine = lone.join("lone")  # so lone starts level with big's one turn at once
            await _until(lambda: "lone" in big.remote)
            assert big.remote["lone"][:2] == (1, 1) and lone.remote["big"][:2] == (3, 1)
            assert big.may_try("big", tickets[1]) and not lone.may_try("lone", mine)  # a tie: the older waiter
            big.leave("big", tickets[1], served=True)
            await _until(lambda: lone.remote.get("big", (0, 0))[:2] == (2, 2))
            assert not big.may_try("big", tickets[2]) and lone.may_try("lone", mine)  # big (2 turns) yields
            lone.leave("lone", mine, served=True)  # lone served on pod 2: nobody waits there, its entry goes
            await _until(lambda: not big.remote)
            assert big.may_try("big", tickets[2]) and not syncs[1].published
            assert await syncs[1].redis.exists(prefix + "pod-2") == 0
        finally:
            for s in syncs:
                await s.close()

    asyncio.run(scenario())


def test_a_dead_pods_entry_expires(redis_server: RedisServer) -> None:
    async def scenario() -> None:
        prefix = f"t:{uuid.uuid4().hex[:8]}:"
        one, two = RoutingState(), RoutingState()
        live = WaitSync(redis_server.url, one, "pod-1", prefix=prefix, interval_s=0.02)
        dying = WaitSync(redis_server.url, two, "pod-2", prefix=prefix, interval_s=0.02, ttl_s=0.3)
        live.start()
        dying.start()
        one.wait_room(ALIAS).join("big")
        two.wait_room(ALIAS).join("lone")  # never leaves: the pod dies with it waiting
        await _until(lambda: "lone" in one.wait_room(ALIAS).remote)
        assert dying._task is not None
        dying._task.cancel()  # the pod stops without a word, its request still waiting
        await asyncio.gather(dying._task, return_exceptions=True)
        started = asyncio.get_running_loop().time()
        await _until(lambda: "lone" not in one.wait_room(ALIAS).remote, timeout=3.0)
        assert asyncio.get_running_loop().time() - started < 1.5
        await _until(lambda: asyncio.get_running_loop().time() - started > 0.1)
        assert await live.redis.smembers(prefix + "pods") == {b"pod-1"}  # the dead pod dropped from the set
        await live.close()
        await dying.redis.aclose()

    asyncio.run(scenario())


def test_redis_down_leaves_each_pod_fair_on_its_own(redis_server: RedisServer) -> None:
    async def scenario() -> None:
        prefix = f"t:{uuid.uuid4().hex[:8]}:"
        one, two = RoutingState(), RoutingState()
        syncs = [WaitSync(redis_server.url, state, pod, prefix=prefix, interval_s=0.02, retry_s=0.1)
                 for state, pod in ((one, "pod-1"), (two, "pod-2"))]
        for s in syncs:
            s.start()
        try:
            big = one.wait_room(ALIAS)
            first, second = big.join("big"), big.join("big")
            big.leave("big", first, served=True)
            two.wait_room(ALIAS).join("lone")
            await _until(lambda: "lone" in big.remote)
            assert not big.may_try("big", second)
            redis_server.stop()
            await _until(lambda: not big.remote)  # no view: pod 1 does not wait for a pod it cannot hear
            assert big.may_try("big", second) and syncs[0].status()["redis"] == "unreachable"
        finally:
            for s in syncs:
                await s.close()

    asyncio.run(scenario())
