"""The fast spend bucket end to end: a team's money per hour, set in the YAML, the admin API and the CLI.

The example prices sim-openai-mumbai at $10 per 1M output tokens at ₹88/$, so a
request allowed 400 output tokens holds about ₹0.35; with ``spend_per_hour:
"0.50"`` one such request fits at a time, and each settles to its actual cost
(a few paise), refunding the rest, so sequential requests keep flowing.
"""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import httpx
import openai
import pytest
import yaml

from tests.harness import ROOT, Stack, admin_token, running_stack

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"
MSGS = [{"role": "user", "content": "loop"}]


def _spend_limit(tree: dict) -> None:
    tree["budgets"]["scopes"].append({"scope": "team:platform", "spend_per_hour": "0.50"})


@pytest.fixture(scope="module")
def spend_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("spend"), mutate=_spend_limit) as st:
        yield st


def _post(stack: Stack, max_tokens: int, **headers: str) -> httpx.Response:
    return httpx.post(stack.gateway_url + CHAT, timeout=20,
                      headers={"Authorization": f"Bearer {stack.key}", "x-sim-output-tokens": "5", **headers},
                      json={"model": "chat-openai", "messages": MSGS, "max_completion_tokens": max_tokens})


def test_settled_requests_refund_their_holds_and_a_burst_is_refused_with_retry_after(spend_stack: Stack) -> None:
    for _ in range(6):  # 6 x ₹0.35 held, far above ₹0.50/h, but each settles at a few paise
        resp = _post(spend_stack, 400)
        assert resp.status_code == 200, resp.text
        time.sleep(0.05)  # the refund is applied in the background after settlement
    with ThreadPoolExecutor(4) as pool:
        burst = list(pool.map(lambda _: _post(spend_stack, 400, **{"x-sim-ttft-ms": "600"}), range(4)))
    refused = [r for r in burst if r.status_code == 429]
    assert sum(r.status_code == 200 for r in burst) >= 1 and refused
    for r in refused:
        err = r.json()["error"]
        assert err["code"] == "spend_rate_exceeded" and "per hour" in err["message"] and "Team platform" in err["message"]
        assert int(r.headers["Retry-After"]) >= 1


def test_the_sdk_sees_a_rate_limit_error_and_a_hold_above_the_hourly_limit_is_final(spend_stack: Stack) -> None:
    with openai.OpenAI(base_url=spend_stack.gateway_url + "/v1", api_key=spend_stack.key, max_retries=0) as sdk:
        with pytest.raises(openai.RateLimitError) as err:
            sdk.chat.completions.create(model="chat-openai", messages=MSGS, max_completion_tokens=1000)
    assert err.value.code == "spend_rate_exceeded"
    assert err.value.response.headers["x-should-retry"] == "false" and "Retry-After" not in err.value.response.headers


def test_admin_api_and_cli_set_it_and_refuse_floats_negatives_and_currency_formats(spend_stack: Stack) -> None:
    token = admin_token(spend_stack.config, "fin", "finance", live_at=spend_stack.gateway_url)
    url = spend_stack.gateway_url + "/admin/v1/budgets/team:kyc-ops"
    auth = {"Authorization": f"Bearer {token}"}
    bad = httpx.put(url, headers=auth, json={"monthly_limit": "100.00", "spend_per_hour": 2.5})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "config_rejected"
    assert "spend_per_hour" in bad.json()["error"]["message"] and "not a number" in bad.json()["error"]["message"]
    worse = httpx.put(url, headers=auth, json={"monthly_limit": "-1", "spend_per_hour": "₹5", "soft_pct": 500})
    problems = worse.json()["error"]["problems"]
    assert worse.status_code == 400 and len(problems) >= 3, problems
    ok = httpx.put(url, headers=auth, json={"monthly_limit": "100.00", "spend_per_hour": "12.50"})
    assert ok.status_code == 200 and ok.json()["spend_per_hour"] == "12.500000"
    cli = subprocess.run([sys.executable, "-m", "farebox", "budgets", "set", "team:kyc-ops", "--config",
                          str(spend_stack.config), "--monthly-limit", "100.00", "--spend-per-hour", "7.25"],
                         cwd=ROOT, capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    assert '"spend_per_hour": "7.25"' in cli.stdout
    refused = subprocess.run([sys.executable, "-m", "farebox", "budgets", "set", "team:kyc-ops", "--config",
                              str(spend_stack.config), "--monthly-limit", "100.00", "--spend-per-hour", "7,25"],
                             cwd=ROOT, capture_output=True, text=True)
    assert refused.returncode != 0 and "spend_per_hour" in refused.stderr + refused.stdout


def test_config_check_lists_every_spend_problem(spend_stack: Stack, tmp_path: Path) -> None:
    tree = yaml.safe_load(spend_stack.config.read_text())
    tree["budgets"]["scopes"] += [{"scope": "team:kyc-ops", "spend_per_hour": 3.5},
                                  {"scope": "team:platform", "spend_per_hour": "-2"},
                                  {"scope": "bu:retail", "spend_per_hour": "5 USD"}]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(tree))
    out = subprocess.run([sys.executable, "-m", "farebox", "config", "check", str(bad)],
                         cwd=ROOT, capture_output=True, text=True)
    text = out.stdout + out.stderr
    assert out.returncode != 0
    assert text.count("spend_per_hour") >= 3, text
    for fragment in ("not a number", "negative", "'5 USD'"):
        assert fragment in text
