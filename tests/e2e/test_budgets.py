"""Budgets end to end: holds, 429 budget_exhausted, soft threshold, caps, admin API, rebuild, expiry."""

from __future__ import annotations

import time
from typing import Iterator

import httpx
import openai
import pytest

from ledger.events import BudgetThresholdCrossed, HoldExpired, RequestSettled
from tests.harness import Stack, read_events, running_stack
from tests.harness import admin_token as make_admin_token

pytestmark = pytest.mark.e2e

MSG = [{"role": "user", "content": "hello budget"}]


def small_budgets(tree: dict) -> None:
    tree["server"]["hold_ttl_s"] = 3
    tree["server"]["sweep_interval_s"] = 0.2
    tree["budgets"] = {
        "timezone": "Asia/Kolkata",
        "per_request_cap": "3.00",
        "runs": {"limit": "1.00", "max_calls": 3},
        # chat-openai: hold for 20 output tokens ~ small; each request costs about ₹0.03
        "scopes": [{"scope": "team:platform", "monthly_limit": "0.60", "soft_pct": 50}],
    }


@pytest.fixture(scope="module")
def bstack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("budgets"), mutate=small_budgets) as st:
        yield st


@pytest.fixture(scope="module")
def admin_token(bstack: Stack) -> str:
    return make_admin_token(bstack.config, "fin", "finance", live_at=bstack.gateway_url)


def test_budget_exhausted_is_429_without_retry_after(bstack: Stack) -> None:
    client = openai.OpenAI(base_url=bstack.gateway_url + "/v1", api_key=bstack.key, max_retries=0)
    remaining = []
    with client:
        refused = None
        for _ in range(60):
            try:
                raw = client.chat.completions.with_raw_response.create(
                    model="chat-openai", messages=MSG, max_completion_tokens=20)
                remaining.append(raw.headers["x-fb-budget-remaining"])
            except openai.RateLimitError as exc:
                refused = exc
                break
        assert refused is not None, "the budget never ran out"
    assert refused.code == "budget_exhausted"
    assert refused.response.headers.get("retry-after") is None
    assert "team:platform" in refused.message and "left of ₹0.600000" in refused.message
    # remaining falls monotonically and is a decimal string, never negative
    values = [float(v) for v in remaining]  # only to compare order in the test
    assert values == sorted(values, reverse=True) and values[-1] >= 0
    time.sleep(0.3)
    events = read_events(bstack.events_path)
    settled = [e for e in events if isinstance(e, RequestSettled)]
    spent = sum(e.cost_by_scope.get("team:platform", 0) for e in settled)
    overrun = sum(e.overrun_micro for e in settled)
    assert spent <= 600_000 + overrun
    soft = [e for e in events if isinstance(e, BudgetThresholdCrossed)]
    assert len(soft) == 1 and soft[0].scope == "team:platform" and soft[0].threshold_pct == 50


def test_admin_budget_view_and_update(bstack: Stack, admin_token: str) -> None:
    time.sleep(1.2)  # the admin token file is picked up by the reloader
    h = {"Authorization": f"Bearer {admin_token}"}
    view = httpx.get(bstack.gateway_url + "/admin/v1/budgets/team:platform", headers=h).json()
    # refused: what is left cannot pay another hold; "exhausted" only once nothing is left at all
    assert view["state"] in ("soft", "exhausted") and view["limit"] == "0.600000" and view["currency"] == "INR"
    assert view["settled_micro"] > 0 and view["held_micro"] == 0
    assert view["remaining_micro"] == view["limit_micro"] - view["settled_micro"]
    # a virtual key is not an admin token
    assert httpx.get(bstack.gateway_url + "/admin/v1/budgets/team:platform",
                     headers={"Authorization": f"Bearer {bstack.key}"}).status_code == 401
    bad = httpx.put(bstack.gateway_url + "/admin/v1/budgets/team:ghosts", headers=h, json={"monthly_limit": "x"})
    assert bad.status_code == 400 and "unknown team" in bad.json()["error"]["message"]
    assert "monthly_limit" in bad.json()["error"]["message"]
    raised = httpx.put(bstack.gateway_url + "/admin/v1/budgets/team:platform", headers=h,
                       json={"monthly_limit": "100.00", "soft_pct": 90})
    assert raised.status_code == 200, raised.text
    assert raised.json()["state"] == "soft" and raised.json()["limit"] == "100.000000"
    with openai.OpenAI(base_url=bstack.gateway_url + "/v1", api_key=bstack.key, max_retries=0) as client:
        ok = client.chat.completions.with_raw_response.create(model="chat-openai", messages=MSG, max_completion_tokens=20)
        assert ok.headers["x-fb-budget-state"] == "soft"


def test_per_request_cap_and_run_call_cap(bstack: Stack) -> None:
    with openai.OpenAI(base_url=bstack.gateway_url + "/v1", api_key=bstack.key, max_retries=0) as client:
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(model="chat-openai", messages=MSG, max_completion_tokens=16000)
        assert err.value.code == "request_cost_cap_exceeded"
        run = {"x-fb-run-id": "agent-run-42"}
        for _ in range(3):
            client.chat.completions.create(model="chat-openai", messages=MSG, max_completion_tokens=5, extra_headers=run)
        with pytest.raises(openai.RateLimitError) as err:
            client.chat.completions.create(model="chat-openai", messages=MSG, max_completion_tokens=5, extra_headers=run)
        assert err.value.code == "run_calls_exhausted"


def test_restart_rebuilds_the_same_balances(bstack: Stack, admin_token: str) -> None:
    h = {"Authorization": f"Bearer {admin_token}"}
    before = httpx.get(bstack.gateway_url + "/admin/v1/budgets/team:platform", headers=h).json()
    bstack.restart_gateway()
    after = httpx.get(bstack.gateway_url + "/admin/v1/budgets/team:platform", headers=h).json()
    assert after == before


def test_killed_pod_hold_expires_and_is_charged_in_full(bstack: Stack, admin_token: str) -> None:
    h = {"Authorization": f"Bearer {admin_token}"}
    # A slow stream is in flight when the gateway is killed: its hold is never settled.
    client = httpx.Client(base_url=bstack.gateway_url, headers={"Authorization": f"Bearer {bstack.key}"}, timeout=10)
    body = {"model": "chat-openai", "messages": MSG, "stream": True, "max_completion_tokens": 50}
    with client.stream("POST", "/v1/chat/completions", json=body,
                       headers={"x-sim-tokens-per-s": "5", "x-sim-output-tokens": "50"}) as resp:
        rid = resp.headers["x-fb-request-id"]
        lines = resp.iter_lines()  # keep a reference: a dropped iterator closes the stream
        next(lines)
        time.sleep(0.3)  # the admitted event is durable (group commit) before the kill
        bstack.restart_gateway(kill=True)
    client.close()
    deadline = time.monotonic() + 10
    expired = []
    while time.monotonic() < deadline and not expired:
        time.sleep(0.3)
        expired = [e for e in read_events(bstack.events_path) if isinstance(e, HoldExpired) and e.request_id == rid]
    mine = [e for e in read_events(bstack.events_path) if e.request_id == rid]
    assert len(expired) == 1, f"the orphaned hold did not expire: {mine}"
    assert expired[0].charged["team:platform"] > 0
    assert not any(isinstance(e, RequestSettled) and e.request_id == rid for e in read_events(bstack.events_path))
    view = httpx.get(bstack.gateway_url + "/admin/v1/budgets/team:platform", headers=h).json()
    assert view["held_micro"] == 0
