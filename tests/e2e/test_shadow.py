"""Shadow traffic end to end: every request to a shadowed alias is also sent, after its answer and in the
background, to a slow candidate; the caller never waits for it, the leg is metered as its own request on the
platform's team (never the caller's budget) at batch priority, and the usage API puts both sides together."""

from __future__ import annotations

import time
from typing import Iterator

import httpx
import openai
import pytest

from ledger.events import RequestAdmitted, RequestSettled
from tests.harness import Stack, admin_token, mint, read_events, running_stack, wait_key_live

pytestmark = pytest.mark.e2e
CANDIDATE_TTFT_MS = 700


def shadowed(tree: dict) -> None:
    tree["batches"] = {"cpu_ceiling": 1.0}  # legs yield a busy process; this one serves them when it can
    tree["aliases"].append({"name": "chat-shadowed", "kind": "chat", "deployments": ["sim-openai-mumbai"],
                            "shadow": {"alias": "chat-anthropic", "pct": 100, "team": "platform"}})


def slow_candidate(tree: dict) -> None:
    tree["models"] = {"sim-claude-mid-2026-08": {"ttft_ms": CANDIDATE_TTFT_MS}}


@pytest.fixture(scope="module")
def shadow_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("shadow"), aliases="chat-shadowed", mutate=shadowed,
                       sim_mutate=slow_candidate) as st:
        yield st


def test_the_caller_never_waits_for_the_shadow_and_never_pays_for_it(shadow_stack: Stack) -> None:
    caller = mint(shadow_stack.config, "kyc-ops", "kyc-summariser", "chat-shadowed")
    wait_key_live(shadow_stack.gateway_url, caller)
    asked: dict[str, float] = {}
    with openai.OpenAI(base_url=shadow_stack.gateway_url + "/v1", api_key=caller, max_retries=0) as client:
        for i in range(10):
            started = time.monotonic()
            raw = client.chat.completions.with_raw_response.create(
                model="chat-shadowed", max_tokens=8, messages=[{"role": "user", "content": f"question {i}"}])
            asked[raw.headers["x-fb-request-id"]] = time.monotonic() - started
    assert max(asked.values()) < CANDIDATE_TTFT_MS / 1000  # no caller waited for its shadow

    def outcomes() -> dict[str, float]:  # every leg sent is counted once it ended, by outcome
        text = httpx.get(shadow_stack.gateway_url + "/metrics", timeout=10).text
        return {line.split('"')[1]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                if line.startswith("farebox_shadow_legs_total{")}

    deadline = time.monotonic() + 30
    while sum(outcomes().values()) < 10 and time.monotonic() < deadline:
        time.sleep(0.2)
    counted = outcomes()
    # one leg per request: served, or dropped or refused first when the process is busy (never retried)
    assert sum(counted.values()) == 10 and counted.get("ok", 0) >= 1 and counted.get("error", 0) == 0, counted
    events = read_events(shadow_stack.events_path)
    admitted = {e.request_id: e for e in events if isinstance(e, RequestAdmitted)}
    settled = {e.request_id: e for e in events if isinstance(e, RequestSettled)}
    shadows = [e for e in admitted.values() if e.tags.get("fb.shadow") == "chat-shadowed"]
    assert len([e for e in shadows if settled[e.request_id].final_status == 200]) == counted["ok"]
    for leg in shadows:  # the platform's own request, to the candidate, at batch priority
        assert (leg.team, leg.app, leg.alias, leg.tags.get("fb.priority")) == (
            "platform", "shadow", "chat-anthropic", "batch")
        if settled[leg.request_id].final_status == 200:
            assert settled[leg.request_id].latency_ms >= CANDIDATE_TTFT_MS
    assert all(admitted[rid].team == "kyc-ops" and "fb.shadow" not in admitted[rid].tags for rid in asked)

    token = admin_token(shadow_stack.config, "fin-shadow", "finance", live_at=shadow_stack.gateway_url)
    auth = {"Authorization": f"Bearer {token}"}
    budget = httpx.get(shadow_stack.gateway_url + "/admin/v1/budgets/team:kyc-ops", headers=auth, timeout=30).json()
    assert budget["held_micro"] == 0  # the caller's team paid for its own ten requests and nothing else
    assert budget["settled_micro"] == sum(settled[rid].cost_micro for rid in asked)
    usage = httpx.get(shadow_stack.gateway_url + "/admin/v1/usage", params={"by": "alias,shadow"}, headers=auth,
                      timeout=60).json()["data"]
    sides = {(row["alias"], row["shadow"]): row["requests"] for row in usage}
    assert sides[("chat-shadowed", None)] == 10 and sides[("chat-anthropic", "chat-shadowed")] == len(shadows)
