"""Provisioned capacity end to end: the owning team's requests go to its reserved deployment first (whatever the
shared deployments' weight), spill to the shared ones while it is full and come back when it frees; another
team's requests never touch it; its tokens cost the owner nothing (the reservation is billed flat, finance side)."""

from __future__ import annotations

import threading
import time
from typing import Iterator

import httpx
import openai
import pytest

from ledger.events import RequestAttempted
from tests.harness import Stack, admin_token, mint, read_events, running_stack, wait_key_live

pytestmark = pytest.mark.e2e
PTU = "sim-ptu"


def reserved(tree: dict) -> None:
    compat = next(d for d in tree["deployments"] if d["id"] == "sim-compat-mumbai")
    tree["deployments"].append({
        **compat, "id": PTU, "model": "sim-ptu-llama", "weight": 1, "limits": {"concurrent_sequences": 1},
        "price_per_1m": {"currency": "USD", "input": "0", "output": "0"},
        "provisioned": {"team": "platform", "per_hour": "12.00"}})
    tree["aliases"].append({"name": "chat-ptu", "kind": "chat", "deployments": ["sim-openai-mumbai", PTU],
                            "sticky": False})


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("ptu"), aliases="chat-ptu", mutate=reserved) as st:
        yield st


def _ask(url: str, key: str, text: str) -> str:
    with openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0) as client:
        raw = client.chat.completions.with_raw_response.create(
            model="chat-ptu", messages=[{"role": "user", "content": text}], max_tokens=8)
    return raw.headers["x-fb-deployment"]


def _free(stack: Stack, auth: dict) -> int:
    data = httpx.get(stack.gateway_url + "/admin/v1/deployments", headers=auth, timeout=10).json()["data"]
    (ptu,) = [d for d in data if d["id"] == PTU]
    assert ptu["provisioned"] == {"team": "platform"}
    return ptu["sequences_free"]


def test_the_owner_uses_it_first_spills_while_full_and_others_never(stack: Stack) -> None:
    auth = {"Authorization": f"Bearer {admin_token(stack.config, 'ops-ptu', 'auditor', live_at=stack.gateway_url)}"}
    # weight 60 against 1: without the reservation the shared deployment would take nearly all of these
    assert [_ask(stack.gateway_url, stack.key, f"owner {i}") for i in range(6)] == [PTU] * 6
    other = mint(stack.config, "kyc-ops", "kyc-summariser", "chat-ptu")
    wait_key_live(stack.gateway_url, other)
    assert {_ask(stack.gateway_url, other, f"other {i}") for i in range(6)} == {"sim-openai-mumbai"}

    done: list[str] = []

    def slow_stream() -> None:
        with openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key, max_retries=0) as client:
            with client.chat.completions.with_streaming_response.create(
                    model="chat-ptu", messages=[{"role": "user", "content": "long"}], stream=True,
                    extra_headers={"x-sim-ttft-ms": "2500", "x-sim-output-tokens": "5"}) as s:
                list(s.iter_lines())
                done.append(s.headers["x-fb-deployment"])

    thread = threading.Thread(target=slow_stream)
    thread.start()
    deadline = time.monotonic() + 15
    while _free(stack, auth) != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _free(stack, auth) == 0  # the reservation's one sequence is taken
    assert _ask(stack.gateway_url, stack.key, "while full") == "sim-openai-mumbai"  # spilled, not refused
    thread.join(30)
    assert done == [PTU] and _free(stack, auth) == 1
    assert _ask(stack.gateway_url, stack.key, "after") == PTU  # back on its own capacity

    attempts = [e for e in read_events(stack.events_path) if isinstance(e, RequestAttempted) and e.outcome == "ok"]
    on_ptu = [e for e in attempts if e.deployment == PTU]
    assert len(on_ptu) == 8 and {e.team for e in on_ptu} == {"platform"} and {e.cost_micro for e in on_ptu} == {0}
    assert all(e.cost_micro > 0 for e in attempts if e.deployment == "sim-openai-mumbai")
