"""Past the soft threshold: traffic continues, optionally on a cheaper alias; /metrics counts it."""

from __future__ import annotations

from typing import Iterator

import httpx
import openai
import pytest

from tests.harness import Stack, running_stack

pytestmark = pytest.mark.e2e

MSG = [{"role": "user", "content": "soft"}]


def soft_downgrade(tree: dict) -> None:
    tree["budgets"]["scopes"] = [
        {"scope": "team:platform", "monthly_limit": "1.00", "soft_pct": 1, "downgrade_alias": "chat-anthropic"},
    ]


@pytest.fixture(scope="module")
def sstack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("soft"), mutate=soft_downgrade) as st:
        yield st


def test_soft_threshold_downgrades_and_metrics_count(sstack: Stack) -> None:
    with openai.OpenAI(base_url=sstack.gateway_url + "/v1", api_key=sstack.key, max_retries=0) as client:
        first = client.chat.completions.with_raw_response.create(model="chat-openai", messages=MSG,
                                                                   max_completion_tokens=20)
        assert first.headers["x-fb-budget-state"] == "soft"  # this hold crossed 1%
        assert first.headers["x-fb-deployment"] == "sim-openai-mumbai"
        second = client.chat.completions.with_raw_response.create(model="chat-openai", messages=MSG,
                                                                    max_completion_tokens=20)
    assert second.headers["x-fb-downgraded-from"] == "chat-openai"
    assert second.headers["x-fb-deployment"] == "sim-anthropic-mumbai"
    assert second.parse().model == "chat-anthropic"
    text = httpx.get(sstack.gateway_url + "/metrics").text
    assert 'farebox_requests_total{alias="chat-openai",status="200"} 1.0' in text
    assert 'farebox_requests_total{alias="chat-anthropic",status="200"} 1.0' in text
    assert "farebox_admission_seconds_count 2.0" in text
    # Teams are labels (cost and tokens by team, budget use by scope: bounded sets); keys never are.
    assert 'farebox_cost_micro_total{alias="chat-openai",team="platform"}' in text
    assert sstack.key not in text and "key_id" not in text and 'scope="key:' not in text
