"""A key pinned to a region or a deployment, refused after its only deployment answered 503: the
refusal says the pin kept the request home (OpenAI-shaped, no provider key), and nothing went abroad."""

from __future__ import annotations

import uuid
from typing import Iterator

import httpx
import pytest

from tests.harness import EXAMPLES, Stack, mint, running_stack, wait_key_live, without_standbys

pytestmark = pytest.mark.e2e

HOME, ABROAD, ABROAD_MODEL = "sim-openai-mumbai", "sim-anthropic-mumbai", "sim-claude-mid-2026-08"
PROVIDER_KEYS = [line.split("=", 1)[1] for line in (EXAMPLES / "secrets.env").read_text().splitlines()
                 if "=" in line and not line.startswith("#")]


def _two_regions(tree: dict) -> None:
    without_standbys(tree)  # one deployment per region: the cloud standbys would keep a pinned key home
    for dep in tree["deployments"]:
        if dep["id"] == ABROAD:
            dep["region"] = "us-east-1"
            dep["data_classes"] = ["public", "internal"]  # confidential traffic must not cross regions


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("pin-refusal"), mutate=_two_regions) as st:
        yield st


def sim_requests(stack: Stack, model: str) -> int:
    return httpx.get(f"{stack.sim_url}/_sim/stats").json()["models"].get(model, {}).get("requests", 0)


@pytest.mark.parametrize("pin", [("--regions", "ap-south-1"), ("--deployments", HOME)])
def test_pinned_key_refused_after_503s_says_the_pin_kept_it_home(stack: Stack, pin: tuple[str, str]) -> None:
    key = mint(stack.config, "platform", "playground", "chat-default", *pin)
    wait_key_live(stack.gateway_url, key)
    abroad = sim_requests(stack, ABROAD_MODEL)
    r = httpx.post(f"{stack.gateway_url}/v1/chat/completions", timeout=30,
                   headers={"Authorization": f"Bearer {key}", "x-sim-fault": "503"},
                   json={"model": "chat-default", "max_completion_tokens": 5,
                         "messages": [{"role": "user", "content": f"stay home {uuid.uuid4().hex}"}]})
    assert r.status_code == 503, r.text
    error = r.json()["error"]
    assert set(error) == {"type", "code", "message", "param"} and "choices" not in r.json()
    assert error["code"] == "pinned_deployments_unavailable"
    assert "pinned to" in error["message"] and "not sent elsewhere" in error["message"]
    assert f"({ABROAD})" in error["message"] and "HTTP 503" in error["message"]
    assert PROVIDER_KEYS and not any(secret in r.text for secret in PROVIDER_KEYS)
    assert "SIM_OPENAI_KEY" not in r.text
    assert sim_requests(stack, ABROAD_MODEL) == abroad  # and indeed nothing went abroad
