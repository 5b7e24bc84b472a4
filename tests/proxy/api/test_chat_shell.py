"""The chat and embeddings handlers in process: the real aiohttp app over fake ports (an in-memory event
log, a scripted budget port, in-process buckets) and the provider simulator served in the same loop.

What the shell must do, whichever budget adapter it holds: record admitted -> attempted -> settled in
that order, settle the budget port with the actual cost, refuse before any upstream byte, answer in the
OpenAI shape, and serve the cheaper alias the budget port names.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from farebox.pod import pod_app
from infra.simulator.app import create_app as create_simulator
from infra.simulator.config import parse_config
from proxy.errors import BudgetRefused
from tests.proxy.fakes import MemoryLog, ScriptedBudgets, example_tree, key, runtime, snapshot

SIMULATOR = {"accounts": [{"name": "acct-retail", "api_key": "sk-sim-openai-retail-0001"},
                          {"name": "acct-retail-anthropic", "api_key": "sk-sim-anthropic-retail-0001"}],
             "defaults": {"ttft_ms": 0, "tokens_per_s": 0, "output_tokens": 12}}
# The handlers keep per-request values under string keys (request["key"], ...), which aiohttp warns about;
# moving them to web.RequestKey touches the middleware in proxy/api/app.py and is left to that change.
pytestmark = pytest.mark.filterwarnings("ignore::aiohttp.web_exceptions.NotAppKeyWarning")

CHAT = {"model": "chat-default", "messages": [{"role": "user", "content": "Say hello."}], "max_completion_tokens": 64}


class Pod:
    def __init__(self, client: TestClient, log: MemoryLog, budgets: ScriptedBudgets, plaintext: str) -> None:
        self.client, self.log, self.budgets = client, log, budgets
        self.auth = {"Authorization": f"Bearer {plaintext}"}

    async def post(self, path: str, body: dict, **headers: str):  # type: ignore[no-untyped-def]
        return await self.client.post(path, data=orjson.dumps(body), headers={**self.auth, **headers})


@pytest.fixture
async def pod() -> AsyncIterator[Pod]:
    sim = TestServer(create_simulator(parse_config(SIMULATOR)))
    await sim.start_server()
    tree = example_tree(str(sim.make_url("")).rstrip("/"))
    tree["aliases"].append({"name": "chat-small", "kind": "chat", "deployments": ["sim-openai-mumbai"]})
    plaintext, record = key()
    log, budgets = MemoryLog(), ScriptedBudgets()
    rt = runtime(snapshot(tree, [record]), budgets=budgets, log=log, clock=time.time)
    client = TestClient(TestServer(pod_app(rt)))
    await client.start_server()
    yield Pod(client, log, budgets, plaintext)
    await client.close()
    await sim.close()


async def test_a_completion_is_admitted_attempted_settled_in_order(pod: Pod) -> None:
    resp = await pod.post("/v1/chat/completions", CHAT)
    body = await resp.json()
    assert resp.status == 200, body
    assert body["object"] == "chat.completion" and body["model"] == "chat-default"
    rid = body["x_farebox"]["request_id"]
    assert pod.log.types() == ["request.admitted", "request.attempted", "request.settled"]
    settled = pod.log.events[-1]
    assert settled.cost_micro == body["x_farebox"]["cost_micro"] > 0
    assert pod.budgets.settled[rid] == settled.cost_by_scope  # the port was told the actual charge
    assert resp.headers["x-fb-deployment"] == body["x_farebox"]["deployment"] and resp.headers["x-fb-attempts"] == "1"
    assert pod.budgets.asks[0].hold_micro == pod.log.events[0].holds["team:platform"]


async def test_a_whole_answer_says_where_its_time_went(pod: Pod) -> None:
    """``Server-Timing``: admission, the attempts' time upstream, the wait for a durable settlement and the
    gateway's own rest; each a non-negative number of ms, and the parts within the whole request's time."""
    started = time.perf_counter()
    resp = await pod.post("/v1/chat/completions", CHAT)
    elapsed_ms = (time.perf_counter() - started) * 1000
    assert resp.status == 200
    parts = dict(part.strip().split(";dur=") for part in resp.headers["server-timing"].split(","))
    assert list(parts) == ["admit", "upstream", "durable", "gateway"]
    assert all(float(ms) >= 0 for ms in parts.values())
    assert float(parts["upstream"]) > 0  # the simulator answered over HTTP
    assert float(parts["upstream"]) + float(parts["durable"]) + float(parts["gateway"]) <= elapsed_ms


async def test_a_stream_ends_with_the_usage_chunk_and_is_settled(pod: Pod) -> None:
    resp = await pod.post("/v1/chat/completions", {**CHAT, "stream": True, "stream_options": {"include_usage": True}})
    assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
    events = [line[6:] for line in (await resp.text()).split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    usage = orjson.loads(events[-2])
    assert usage["usage"]["completion_tokens"] > 0 and usage["x_farebox"]["cost_micro"] > 0
    assert pod.log.types() == ["request.admitted", "request.attempted", "request.settled"]
    assert pod.log.events[-1].final_status == 200
    assert list(pod.budgets.settled.values())[0]["team:platform"] == usage["x_farebox"]["cost_micro"]


async def test_a_budget_refusal_is_a_429_before_any_upstream_byte(pod: Pod) -> None:
    pod.budgets.refusal = BudgetRefused("The budget of team:platform is exhausted.", code="budget_exhausted",
                                        scope="team:platform")
    resp = await pod.post("/v1/chat/completions", CHAT)
    body = await resp.json()
    assert resp.status == 429 and body["error"]["code"] == "budget_exhausted"
    assert "Retry-After" not in resp.headers and "server-timing" in resp.headers
    assert resp.headers["x-should-retry"] == "false"  # final: the SDKs must not retry it
    assert pod.log.types() == ["request.refused"] and pod.budgets.settled == {}
    assert (pod.log.events[0].error_code, pod.log.events[0].scope) == ("budget_exhausted", "team:platform")


async def test_a_bad_wait_header_is_a_400_naming_it(pod: Pod) -> None:
    resp = await pod.post("/v1/chat/completions", CHAT, **{"x-fb-max-wait-ms": "-5"})
    body = await resp.json()
    assert resp.status == 400 and body["error"]["param"] == "x-fb-max-wait-ms"
    assert resp.headers["x-should-retry"] == "false" and pod.log.events == []


async def test_the_budget_port_names_the_cheaper_alias(pod: Pod) -> None:
    pod.budgets.downgrade = "chat-small"
    resp = await pod.post("/v1/chat/completions", CHAT)
    body = await resp.json()
    assert resp.status == 200 and resp.headers["x-fb-downgraded-from"] == "chat-default"
    assert body["model"] == "chat-small" and body["x_farebox"]["deployment"] == "sim-openai-mumbai"


async def test_every_candidate_failing_is_one_openai_shaped_error_and_a_settlement(pod: Pod) -> None:
    resp = await pod.post("/v1/chat/completions", CHAT, **{"x-sim-fault": "500"})
    body = await resp.json()
    assert resp.status >= 500 and set(body["error"]) == {"type", "code", "message", "param"}
    types = pod.log.types()
    assert types[0] == "request.admitted" and types[-1] == "request.settled" and "request.attempted" in types
    assert pod.log.events[-1].final_status == resp.status and pod.log.events[-1].cost_micro == 0
    assert resp.headers["x-fb-attempts"] == str(types.count("request.attempted"))


async def test_embeddings_take_the_same_path(pod: Pod) -> None:
    resp = await pod.post("/v1/embeddings", {"model": "embed-default", "input": ["a", "b"]})
    body = await resp.json()
    assert resp.status == 200 and len(body["data"]) == 2 and body["model"] == "embed-default"
    assert pod.log.types() == ["request.admitted", "request.attempted", "request.settled"]


async def test_a_stream_cut_after_its_first_bytes_ends_with_one_error_event_and_is_settled(pod: Pod) -> None:
    resp = await pod.post("/v1/chat/completions", {**CHAT, "stream": True}, **{"x-sim-fault": "disconnect"})
    assert resp.status == 200  # the caller already had the first chunks: no failover, no second answer
    events = [line[6:] for line in (await resp.text()).split("\n\n") if line.startswith("data: ")]
    errors = [e for e in events if e.startswith('{"error"')]
    assert len(errors) == 1 and events[-1] == errors[0] and "[DONE]" not in events
    assert pod.log.types() == ["request.admitted", "request.attempted", "request.settled"]
    attempted, settled = pod.log.events[1], pod.log.events[2]
    error = orjson.loads(errors[0])["error"]
    assert attempted.outcome == "unavailable" and attempted.error_code == error["code"] == "provider_unavailable"
    assert attempted.usage.source == "estimated" and attempted.usage.output > 0  # what was relayed is billed
    assert settled.final_status == 503 and settled.cost_micro == attempted.cost_micro > 0
