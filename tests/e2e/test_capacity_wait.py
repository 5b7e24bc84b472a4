"""A request that finds its deployment's provider-limit mirror spent waits a bounded time for capacity
(``timeouts.capacity_wait_s``) instead of being refused at once; past the wait it is refused 429
``provider_capacity`` with Retry-After, and an alias that waits nothing is refused at once. Teams waiting take
the capacity in turn."""

from __future__ import annotations

import threading
import time
from typing import Iterator

import httpx
import openai
import pytest

from tests.harness import Stack, mint, running_stack, wait_key_live

pytestmark = pytest.mark.e2e


def tight(tree: dict) -> None:
    base = next(d for d in tree["deployments"] if d["id"] == "sim-openai-mumbai")
    # 120 requests a minute, mirrored at 90%: 108 at once, then one more every 2/3 s
    tree["deployments"].append({**base, "id": "sim-tight", "weight": 1, "limits": {"rpm": 120}})
    tree["aliases"] += [
        {"name": "chat-tight-now", "kind": "chat", "deployments": ["sim-tight"], "timeouts": {"capacity_wait_s": 0}},
        {"name": "chat-tight-wait", "kind": "chat", "deployments": ["sim-tight"], "timeouts": {"capacity_wait_s": 3}},
    ]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("capacity"), aliases="chat-tight-now,chat-tight-wait",
                       mutate=tight) as st:
        yield st


def _ask(client: openai.OpenAI, alias: str) -> None:
    client.chat.completions.create(model=alias, messages=[{"role": "user", "content": "hi"}], max_completion_tokens=4)


def test_a_spent_mirror_is_waited_for_a_bounded_time(stack: Stack) -> None:
    with openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key, max_retries=0) as client:
        served = 0
        with pytest.raises(openai.RateLimitError) as spent:
            while served < 200:
                _ask(client, "chat-tight-now")
                served += 1
        assert spent.value.code == "provider_capacity" and spent.value.response.headers["retry-after"]
        assert 100 <= served <= 130  # the mirror's 108, and what refilled while they ran
        started = time.monotonic()
        _ask(client, "chat-tight-wait")  # waits for the next request's worth of refill (2/3 s at most)
        assert time.monotonic() - started < 2.5  # (that it waited at all: the metric below)
        with pytest.raises(openai.RateLimitError):
            _ask(client, "chat-tight-now")  # the refill went to the request that waited
    metrics = httpx.get(stack.gateway_url + "/metrics", timeout=10).text
    assert 'farebox_capacity_wait_seconds_count{outcome="served"} 1.0' in metrics
    assert 'farebox_capacity_waiting{alias="chat-tight-wait"} 0.0' in metrics  # it was in the room, and left


def fleet(tree: dict) -> None:
    tight(tree)
    compat = next(d for d in tree["deployments"] if d["id"] == "sim-compat-mumbai")
    tree["deployments"].append({**compat, "id": "sim-one-seat", "model": "one-seat-llama", "self_hosted": True,
                                "limits": {"concurrent_sequences": 1}})
    tree["aliases"].append({"name": "chat-one-seat", "kind": "chat", "deployments": ["sim-one-seat"],
                            "timeouts": {"capacity_wait_s": 20}})


@pytest.fixture(scope="module")
def seat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("one-seat"), aliases="chat-one-seat", mutate=fleet) as st:
        yield st


def test_teams_waiting_for_capacity_take_it_in_turn(seat: Stack) -> None:
    """Eight requests of one team and, a moment later, one of another wait for a one-sequence fleet: the
    lone team's request is served as soon as the big team has had one turn, not after all of its requests."""
    other = mint(seat.config, "kyc-ops", "kyc-summariser", "chat-one-seat")
    wait_key_live(seat.gateway_url, other)
    started: dict[str, float] = {}

    def stream(name: str, key: str) -> None:
        with openai.OpenAI(base_url=seat.gateway_url + "/v1", api_key=key, max_retries=0, timeout=60) as client:
            with client.chat.completions.with_streaming_response.create(
                    model="chat-one-seat", messages=[{"role": "user", "content": name}], stream=True,
                    extra_headers={"x-sim-ttft-ms": "250", "x-sim-output-tokens": "3"}) as s:
                started[name] = time.monotonic()  # the gateway answers once the fleet's seat is its
                list(s.iter_lines())

    big = [threading.Thread(target=stream, args=(f"big-{i}", seat.key)) for i in range(8)]
    for t in big:
        t.start()
    time.sleep(0.15)  # the big team's requests are in, the first holds the seat, seven wait
    lone = threading.Thread(target=stream, args=("lone", other))
    lone.start()
    for t in (*big, lone):
        t.join(60)
    assert len(started) == 9, started
    order = sorted(started, key=started.get)
    assert order.index("lone") <= 2, order  # the seat's first holder, at most one waiter of the big team, then it
