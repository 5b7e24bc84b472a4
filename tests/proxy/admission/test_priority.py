"""Priority classes at the outbound (``proxy.admission.priority``): a batch request takes only what the provider
limits hold beyond the interactive reserve, never while the alias's headroom is falling, and is refused
``batch_paused`` with Retry-After when it must wait; interactive requests are what the reserve is for."""

from __future__ import annotations

import pytest

from proxy.admission.priority import BATCH, INTERACTIVE, BatchPaused, clear_batch, request_class
from proxy.admission.ratelimit import deployment_draws
from proxy.errors import InvalidRequest
from proxy.limits import MemoryBuckets
from proxy.limits.draws import items
from proxy.routing.state import RoutingState
from tests.proxy.fakes import example_tree, snapshot


def _snap(rpm: int = 100):
    tree = example_tree()
    for dep in tree["deployments"]:
        dep["limits"] = {"rpm": rpm}
    tree["rate_limits"]["deployment_mirror_pct"] = 100
    return snapshot(tree)


def test_the_class_of_a_request() -> None:
    assert request_class({}, False) == INTERACTIVE
    assert request_class({"x-fb-priority": "Batch"}, False) == BATCH
    assert request_class({"x-fb-priority": "interactive"}, True) == BATCH  # a batch line stays batch
    with pytest.raises(InvalidRequest) as bad:
        request_class({"x-fb-priority": "urgent"}, False)
    assert bad.value.param == "x-fb-priority"


async def test_batch_takes_only_what_is_above_the_interactive_reserve() -> None:
    snap = _snap(rpm=10)
    dep = snap.deployments["sim-openai-mumbai"]
    limits, state, clock = MemoryBuckets(), RoutingState(clock=lambda: 100.0), 100_000_000
    taken = 0
    while True:
        try:
            got, draws = await clear_batch(limits, state, snap, [dep], [dep], 10, 10, clock, reserve_pct=30)
        except BatchPaused as paused:
            assert paused.status == 429 and paused.code == "batch_paused"
            assert int(paused.headers["Retry-After"]) >= 1 and paused.headers["x-should-retry"] == "true"
            break
        assert got is dep and draws
        taken += 1
    assert taken == 7  # 10 requests a minute, 3 of them kept for interactive requests
    # ... which still get them
    for _ in range(3):
        assert (await limits.reserve(items(deployment_draws(snap, dep, 10, 10)), clock)).ok


async def test_batch_pauses_while_any_deployment_of_the_alias_is_short_of_capacity() -> None:
    snap = _snap()
    first, second = snap.deployments["sim-openai-mumbai"], snap.deployments["sim-anthropic-mumbai"]
    now = [100.0]
    state = RoutingState(clock=lambda: now[0])
    limits = MemoryBuckets()
    state.finish(first, "rate_limited", now[0], retry_after_s=2.0)  # a provider 429 on the first
    with pytest.raises(BatchPaused) as paused:  # interactive failover runs on the second: batch waits
        await clear_batch(limits, state, snap, [first, second], [second], 10, 10, 100_000_000)
    assert "sim-openai-mumbai" in paused.value.message and paused.value.headers["Retry-After"] == "7"
    now[0] += 8  # the pause and its grace have passed
    got, _ = await clear_batch(limits, state, snap, [first, second], [first, second], 10, 10, 108_000_000)
    assert got is first


async def test_batch_keeps_the_reserve_of_a_fleets_sequences_and_retries_in_a_second() -> None:
    tree = example_tree()
    for dep in tree["deployments"]:
        dep["limits"] = {"concurrent_sequences": 5}
    snap = snapshot(tree)
    dep = snap.deployments["sim-openai-mumbai"]
    limits, state = MemoryBuckets(), RoutingState(clock=lambda: 100.0)
    taken = 0
    with pytest.raises(BatchPaused) as paused:
        while True:
            await clear_batch(limits, state, snap, [dep], [dep], 10, 10, 100_000_000, reserve_pct=20)
            taken += 1
    assert taken == 4 and paused.value.headers["Retry-After"] == "1"  # one of five slots kept for interactive
    assert (await limits.reserve(items(deployment_draws(snap, dep, 10, 10)), 100_000_000)).ok
