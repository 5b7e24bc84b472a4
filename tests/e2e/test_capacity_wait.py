"""A request that finds its deployment's provider-limit mirror spent waits a bounded time for capacity
(``timeouts.capacity_wait_s``) instead of being refused at once; past the wait it is refused 429
``provider_capacity`` with Retry-After, and an alias that waits nothing is refused at once."""

from __future__ import annotations

import time
from typing import Iterator

import httpx
import openai
import pytest

from tests.harness import Stack, running_stack

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
