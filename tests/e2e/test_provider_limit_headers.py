"""What a provider says is left of its rate limit lowers farebox's mirror of it: an Azure deployment whose
quota other callers have nearly spent (the simulator's per-minute quota, told on every answer in Azure's
``x-ratelimit-remaining-*``) is refused by farebox before the provider would, without a call."""

from __future__ import annotations

import time
from typing import Iterator

import httpx
import openai
import pytest

from ledger.events import RequestAttempted
from tests.harness import Stack, read_events, running_stack

pytestmark = pytest.mark.e2e
MODEL = "sim-azure-quota"


def quota_deployment(tree: dict) -> None:
    azure = next(d for d in tree["deployments"] if d["id"] == "sim-azure-mumbai")
    tree["deployments"].append({**azure, "id": "sim-azure-quota", "model": MODEL, "weight": 1,
                                "limits": {"rpm": 100, "input_tpm": 1_000_000}})
    tree["aliases"].append({"name": "chat-azure-quota", "kind": "chat", "deployments": ["sim-azure-quota"],
                            "timeouts": {"capacity_wait_s": 0}})  # refused at once: no wait for the refill


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("quota"), aliases="chat-azure-quota", mutate=quota_deployment) as st:
        yield st


def test_the_providers_remaining_requests_lower_the_mirror(stack: Stack) -> None:
    # The provider allows this account 100 requests a minute, 87 of them already spent by others (a direct
    # caller on the same key): farebox's mirror (90 of its configured 100) knows none of that.
    httpx.post(f"{stack.sim_url}/_sim/models/{MODEL}", json={"rpm": 100}).raise_for_status()
    with httpx.Client(timeout=10) as direct:
        for _ in range(87):
            direct.post(f"{stack.sim_url}/openai/deployments/{MODEL}/chat/completions?api-version=2024-10-21",
                        headers={"api-key": "sim-azure-retail-0001"},
                        json={"messages": [{"role": "user", "content": "x"}], "max_tokens": 4}).raise_for_status()
    with openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key, max_retries=0) as client:
        first = client.chat.completions.with_raw_response.create(
            model="chat-azure-quota", messages=[{"role": "user", "content": "hi"}], max_completion_tokens=4)
        assert first.headers["x-fb-deployment"] == "sim-azure-quota"
        time.sleep(0.3)  # the mirror is lowered in the background: 12 left at the provider, less 10 of headroom
        served, refused = 1, None
        for _ in range(5):
            try:
                client.chat.completions.create(model="chat-azure-quota", messages=[{"role": "user", "content": "hi"}],
                                               max_completion_tokens=4)
                served += 1
            except openai.RateLimitError as exc:
                refused = exc
                break
    assert refused is not None and refused.code == "provider_capacity"
    assert "Deployment sim-azure-quota" in refused.message and refused.response.headers.get("retry-after")
    assert served <= 3  # the mirror held 2 after the first answer: the provider still had 10 left
    attempts = [e for e in read_events(stack.events_path) if isinstance(e, RequestAttempted)
                and e.deployment == "sim-azure-quota"]
    assert len(attempts) == served and all(a.outcome == "ok" for a in attempts)  # the refusal called nobody
    stats = httpx.get(f"{stack.sim_url}/_sim/stats", timeout=10).json()["models"][MODEL]
    assert stats["outcomes"].get("rate_limited", 0) == 0  # the provider never had to say 429
