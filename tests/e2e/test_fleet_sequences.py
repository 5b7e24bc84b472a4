"""A self-hosted fleet's concurrent sequences as a limit: an attempt holds one of its deployment's slots until it
ends, routing moves traffic to the deployment with free slots before the fleet queues, and with every slot taken
the caller gets a clear 429 with ``Retry-After: 1``; the slots all come back when the streams end."""

from __future__ import annotations

import threading
import time
from typing import Iterator

import httpx
import openai
import pytest

from ledger.events import RequestAttempted
from tests.harness import Stack, admin_token, read_events, running_stack

pytestmark = pytest.mark.e2e
FLEETS = {"sim-fleet-a": "sim-fleet-a-llama", "sim-fleet-b": "sim-fleet-b-llama"}  # deployment -> model


def fleets(tree: dict) -> None:
    compat = next(d for d in tree["deployments"] if d["id"] == "sim-compat-mumbai")
    tree["deployments"] += [
        {**compat, "id": dep, "model": model, "self_hosted": True, "weight": weight,
         "limits": {"concurrent_sequences": 2}}
        for (dep, model), weight in zip(FLEETS.items(), (100, 1))]
    # a short wait for capacity: the request that finds every slot taken is refused well before the streams
    # holding them end (their first token comes after 4 s), however slowly a loaded box starts them
    tree["aliases"].append({"name": "chat-fleet", "kind": "chat", "deployments": list(FLEETS), "sticky": False,
                            "timeouts": {"capacity_wait_s": 0.3}})


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("fleet"), aliases="chat-fleet", mutate=fleets) as st:
        yield st


def _free(stack: Stack, auth: dict) -> dict[str, int]:
    data = httpx.get(stack.gateway_url + "/admin/v1/deployments", headers=auth, timeout=10).json()["data"]
    return {d["id"]: d.get("sequences_free") for d in data if d["id"] in FLEETS}


def test_sequences_are_held_per_attempt_spill_over_and_come_back(stack: Stack) -> None:
    auth = {"Authorization": f"Bearer {admin_token(stack.config, 'ops-fleet', 'auditor', live_at=stack.gateway_url)}"}
    assert _free(stack, auth) == {"sim-fleet-a": 2, "sim-fleet-b": 2}
    served: list[str] = []
    failed: list[BaseException] = []

    def slow_stream(i: int) -> None:
        try:
            with openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key, max_retries=0) as client:
                with client.chat.completions.with_streaming_response.create(
                        model="chat-fleet", messages=[{"role": "user", "content": f"long answer {i}"}], stream=True,
                        extra_headers={"x-sim-ttft-ms": "4000", "x-sim-output-tokens": "5"}) as s:
                    list(s.iter_lines())
                    served.append(s.headers["x-fb-deployment"])
        except BaseException as exc:  # noqa: BLE001 - the assertion below names it
            failed.append(exc)

    threads = [threading.Thread(target=slow_stream, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while _free(stack, auth) != {"sim-fleet-a": 0, "sim-fleet-b": 0} and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _free(stack, auth) == {"sim-fleet-a": 0, "sim-fleet-b": 0}  # two streams on each: the weight gave way

    with openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key, max_retries=0) as client:
        with pytest.raises(openai.RateLimitError) as info:
            client.chat.completions.create(model="chat-fleet", messages=[{"role": "user", "content": "one more"}])
    assert info.value.code == "provider_capacity" and info.value.response.headers["retry-after"] == "1"
    assert "concurrent sequences" in info.value.message

    for t in threads:
        t.join(30)
    assert not failed and sorted(served) == ["sim-fleet-a", "sim-fleet-a", "sim-fleet-b", "sim-fleet-b"]
    stats = httpx.get(stack.sim_url + "/_sim/stats", timeout=10).json()["models"]
    assert {stats[m]["peak_in_flight"] for m in FLEETS.values()} == {2}  # never more than the fleet's limit
    assert _free(stack, auth) == {"sim-fleet-a": 2, "sim-fleet-b": 2}  # every slot back once the streams ended
    ok = [e for e in read_events(stack.events_path) if isinstance(e, RequestAttempted) and e.outcome == "ok"
          and e.deployment in FLEETS]
    assert len(ok) == 4
