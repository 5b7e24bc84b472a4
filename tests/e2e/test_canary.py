"""The synthetic canary end to end: with ``canary.enabled`` every deployment an alias lists gets a tiny request
every interval through the gateway's own path; a deployment that answers is ``up``, one whose host is gone is
``down`` with its error, in ``GET /admin/v1/deployments`` and ``farebox_deployment_up``; the probes are the
platform team's requests (``fb.canary``), pinned to their deployment."""

from __future__ import annotations

import time
from typing import Iterator

import httpx
import pytest

from ledger.events import RequestAdmitted, RequestSettled
from tests.harness import Stack, admin_token, free_port, read_events, running_stack

pytestmark = pytest.mark.e2e


def probing(tree: dict) -> None:
    tree["canary"] = {"enabled": True, "interval_s": 0.5, "timeout_s": 5, "team": "platform"}
    for dep in tree["deployments"]:
        if dep["id"] == "sim-compat-mumbai":  # a fleet whose host is gone
            dep["base_url"] = f"http://127.0.0.1:{free_port()}/v1"


@pytest.fixture(scope="module")
def canary_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("canary"), aliases="chat-openai", mutate=probing) as st:
        yield st


def test_every_deployment_is_probed_and_its_status_shown(canary_stack: Stack) -> None:
    token = admin_token(canary_stack.config, "ops-canary", "auditor", live_at=canary_stack.gateway_url)
    auth = {"Authorization": f"Bearer {token}"}

    def seen() -> dict:
        data = httpx.get(canary_stack.gateway_url + "/admin/v1/deployments", headers=auth, timeout=10).json()["data"]
        return {d["id"]: d["canary"] for d in data}

    deadline = time.monotonic() + 30
    while not ((now := seen()).get("sim-compat-mumbai") and now.get("sim-openai-mumbai")
               and now["sim-openai-mumbai"]["status"] == "up") and time.monotonic() < deadline:
        time.sleep(0.3)
    assert now["sim-openai-mumbai"]["status"] == "up" and now["sim-openai-mumbai"]["last_error"] is None
    assert now["sim-anthropic-mumbai"]["status"] == "up" and now["sim-gemini-mumbai"]["status"] == "up"
    assert now["sim-compat-mumbai"]["status"] == "down" and now["sim-compat-mumbai"]["last_error"]
    metrics = httpx.get(canary_stack.gateway_url + "/metrics", timeout=10).text
    assert 'farebox_deployment_up{deployment="sim-openai-mumbai"} 1.0' in metrics
    assert 'farebox_deployment_up{deployment="sim-compat-mumbai"} 0.0' in metrics
    events = read_events(canary_stack.events_path)
    probes = [e for e in events if isinstance(e, RequestAdmitted) and "fb.canary" in e.tags]
    assert probes and all(e.team == "platform" and e.app == "canary" for e in probes)
    settled = {e.request_id: e for e in events if isinstance(e, RequestSettled)}
    for e in probes:  # each probe pinned to the deployment it checks: never failed over elsewhere
        if e.request_id in settled and settled[e.request_id].deployment is not None:
            assert settled[e.request_id].deployment == e.tags["fb.canary"]
