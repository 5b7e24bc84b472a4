"""Residency-pinned and deployment-restricted keys, end to end (simulator + gateway processes).

chat-default has two deployments in different regions here: sim-openai-mumbai
in ap-south-1 and sim-anthropic-mumbai moved to us-east-1. Keys are minted
through the CLI (``--regions`` / ``--deployments``) into the config database
and go live on the gateway through its follower.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from typing import Iterator

import httpx
import pytest

from tests.harness import ROOT, Stack, mint, running_stack, wait_key_live, without_standbys

pytestmark = pytest.mark.e2e

IN_REGION, ABROAD = "sim-openai-mumbai", "sim-anthropic-mumbai"
IN_REGION_MODEL, ABROAD_MODEL = "sim-gpt-mid-2026-08", "sim-claude-mid-2026-08"
ROUNDS = 12


def _two_regions(tree: dict) -> None:
    without_standbys(tree)  # one deployment per region: the cloud standbys would keep a pinned key home
    for dep in tree["deployments"]:
        if dep["id"] == ABROAD:
            dep["region"] = "us-east-1"
            dep["data_classes"] = ["public", "internal"]  # confidential traffic must not cross regions
    tree["rate_limits"]["key_defaults"] = {"rpm": 100_000, "input_tpm": 10_000_000, "output_tpm": 10_000_000}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("residency"), mutate=_two_regions) as st:
        yield st


def live_key(stack: Stack, *extra: str) -> str:
    key = mint(stack.config, "platform", "playground", "chat-default", *extra)
    wait_key_live(stack.gateway_url, key)
    return key


@pytest.fixture(scope="module")
def pinned(stack: Stack) -> str:
    return live_key(stack, "--regions", "ap-south-1")


@pytest.fixture(scope="module")
def abroad_only(stack: Stack) -> str:
    return live_key(stack, "--deployments", ABROAD)


def chat(stack: Stack, key: str, headers: dict | None = None) -> httpx.Response:
    body = {"model": "chat-default", "max_completion_tokens": 5,
            "messages": [{"role": "user", "content": f"where am I served? {uuid.uuid4().hex}"}]}
    return httpx.post(f"{stack.gateway_url}/v1/chat/completions", json=body, timeout=30,
                      headers={"Authorization": f"Bearer {key}", **(headers or {})})


def sim_requests(stack: Stack, model: str) -> int:
    models = httpx.get(f"{stack.sim_url}/_sim/stats").json()["models"]
    return models.get(model, {}).get("requests", 0)


def sim_faults(stack: Stack, model: str, rate_503: float) -> None:
    httpx.post(f"{stack.sim_url}/_sim/models/{model}", json={"faults": {"rate_503": rate_503}}).raise_for_status()


def served_by(stack: Stack, key: str, n: int = ROUNDS) -> set[str]:
    seen = set()
    for _ in range(n):
        r = chat(stack, key)
        assert r.status_code == 200, r.text
        seen.add(r.headers["x-fb-deployment"])
    return seen


def test_pinned_key_is_always_served_in_region(stack: Stack, pinned: str) -> None:
    abroad = sim_requests(stack, ABROAD_MODEL)
    assert served_by(stack, pinned) == {IN_REGION}
    assert sim_requests(stack, ABROAD_MODEL) == abroad


def test_pinned_key_is_refused_rather_than_sent_abroad(stack: Stack, pinned: str) -> None:
    abroad, home = sim_requests(stack, ABROAD_MODEL), sim_requests(stack, IN_REGION_MODEL)
    r = chat(stack, pinned, {"x-sim-fault": "503"})
    assert r.status_code >= 500, r.text
    assert "error" in r.json() and "choices" not in r.json()
    assert sim_requests(stack, IN_REGION_MODEL) > home  # the in-region deployment was tried ...
    assert sim_requests(stack, ABROAD_MODEL) == abroad  # ... and nothing went abroad


def test_in_region_outage_fails_over_abroad_only_for_unpinned_keys(stack: Stack, pinned: str) -> None:
    sim_faults(stack, IN_REGION_MODEL, 1.0)
    try:
        abroad = sim_requests(stack, ABROAD_MODEL)
        for _ in range(3):
            r = chat(stack, pinned)
            assert r.status_code >= 500, r.text
        assert sim_requests(stack, ABROAD_MODEL) == abroad
        for _ in range(3):  # no pin: the failover works as before
            r = chat(stack, stack.key)
            assert r.status_code == 200, r.text
            assert r.headers["x-fb-deployment"] == ABROAD
        assert sim_requests(stack, ABROAD_MODEL) == abroad + 3
    finally:
        sim_faults(stack, IN_REGION_MODEL, 0.0)


def test_deployment_restricted_key_never_reaches_the_other(stack: Stack, abroad_only: str) -> None:
    home = sim_requests(stack, IN_REGION_MODEL)
    assert served_by(stack, abroad_only) == {ABROAD}
    r = chat(stack, abroad_only, {"x-sim-fault": "503"})
    assert r.status_code >= 500, r.text
    assert sim_requests(stack, IN_REGION_MODEL) == home


def test_unpinned_key_uses_both_deployments(stack: Stack) -> None:
    assert served_by(stack, stack.key, 40) == {IN_REGION, ABROAD}


def test_cli_refuses_unknown_regions_and_deployments(stack: Stack) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "farebox", "keys", "create", "--config", str(stack.config), "--team", "platform",
         "--app", "playground", "--aliases", "chat-default", "--regions", "ap-south-1,mars-1",
         "--deployments", "ghost"],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert out.returncode != 0
    assert "regions[1]: no deployment is in region 'mars-1'" in out.stderr
    assert "deployments[0]: unknown deployment 'ghost'" in out.stderr
    listed = subprocess.run([sys.executable, "-m", "farebox", "keys", "list", "--config", str(stack.config)],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "in ap-south-1 only" in listed and f"deployments {ABROAD}" in listed and "mars-1" not in listed
