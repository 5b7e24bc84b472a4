"""The exact response cache in the request path: the real aiohttp app over fake ports and the in-loop simulator.

Upstream calls are counted at the simulator (``GET /_sim/requests``); every test's prompt carries a fresh
marker so counts never mix. What must hold: a repeat is a hit with no upstream call, settled at once with
cost 0 and the saving recorded; streams are replayed as streams; identical concurrent misses make one call;
the cases the cache must never serve are bypassed and say why; a malformed ``x-fb-cache`` is a 400.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from farebox.pod import pod_app
from infra.simulator.app import create_app as create_simulator
from infra.simulator.config import parse_config
from ledger.events import RequestSettled
from tests.proxy.fakes import MemoryLog, ScriptedBudgets, example_tree, key, runtime, snapshot

SIMULATOR = {"accounts": [{"name": "acct-retail", "api_key": "sk-sim-openai-retail-0001"},
                          {"name": "acct-retail-anthropic", "api_key": "sk-sim-anthropic-retail-0001"}],
             "defaults": {"ttft_ms": 0, "tokens_per_s": 0, "output_tokens": 12}}
pytestmark = pytest.mark.filterwarnings("ignore::aiohttp.web_exceptions.NotAppKeyWarning")


class Pod:
    def __init__(self, client: TestClient, sim: TestClient, log: MemoryLog, budgets: ScriptedBudgets,
                 plaintext: str) -> None:
        self.client, self.sim, self.log, self.budgets = client, sim, log, budgets
        self.auth = {"Authorization": f"Bearer {plaintext}"}

    async def post(self, path: str, body: dict, **headers: str):  # type: ignore[no-untyped-def]
        return await self.client.post(path, data=orjson.dumps(body), headers={**self.auth, **headers})

    async def upstream_calls(self, marker: str) -> int:
        data = (await (await self.sim.get("/_sim/requests", params={"n": "200"})).json())["data"]
        return sum(1 for e in data if marker in orjson.dumps(e.get("body")).decode())

    def settled(self) -> list[RequestSettled]:
        return [e for e in self.log.events if isinstance(e, RequestSettled)]


@pytest.fixture
async def pod() -> AsyncIterator[Pod]:
    sim = TestClient(TestServer(create_simulator(parse_config(SIMULATOR))))
    await sim.start_server()
    tree = example_tree(str(sim.make_url("")).rstrip("/"))
    tree["aliases"].append({"name": "chat-cached", "kind": "chat", "deployments": ["sim-openai-mumbai"],
                            "cache": {"exact": True}})
    plaintext, record = key()
    record["aliases"] = ["chat-cached", "chat-default", "embed-default"]
    log, budgets = MemoryLog(), ScriptedBudgets()
    rt = runtime(snapshot(tree, [record]), budgets=budgets, log=log, clock=time.time)
    client = TestClient(TestServer(pod_app(rt)))
    await client.start_server()
    yield Pod(client, sim, log, budgets, plaintext)
    await client.close()
    await sim.close()


def chat(marker: str, **extra: object) -> dict:
    return {"model": "chat-cached", "messages": [{"role": "user", "content": f"[{marker}] Say hello."}],
            "max_completion_tokens": 64, **extra}


def sse(text: str) -> list[dict]:
    events = [line[6:] for line in text.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [orjson.loads(e) for e in events[:-1]]


def content(chunks: list[dict]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


async def test_a_repeat_is_a_hit_with_no_upstream_call_settled_at_once_with_the_saving(pod: Pod) -> None:
    marker = uuid.uuid4().hex
    first = await pod.post("/v1/chat/completions", chat(marker))
    miss = await first.json()
    assert first.status == 200 and first.headers["x-fb-cache"] == "miss"
    again = await pod.post("/v1/chat/completions", chat(marker))
    hit = await again.json()
    assert again.status == 200, hit
    assert again.headers["x-fb-cache"] == "hit" and again.headers["x-fb-attempts"] == "0"
    assert hit["choices"] == miss["choices"] and hit["id"] != miss["id"]
    assert hit["x_farebox"]["cost_micro"] == 0 and hit["x_farebox"]["cache"] == "hit"
    assert await pod.upstream_calls(marker) == 1
    assert pod.log.types()[-2:] == ["request.admitted", "request.settled"]  # no attempt for a hit
    fetched, served = pod.settled()
    assert not fetched.cache_hit and fetched.cost_micro > 0 and fetched.cache_saved_micro == 0
    assert served.cache_hit and served.cost_micro == 0 and served.attempts == 0
    assert served.cache_saved_micro == fetched.cost_micro == hit["x_farebox"]["cache_saved_micro"]
    assert pod.budgets.settled[served.request_id] == dict.fromkeys(served.cost_by_scope, 0)  # hold released


async def test_a_stream_is_stored_and_a_hit_is_replayed_as_a_stream_either_way(pod: Pod) -> None:
    marker = uuid.uuid4().hex
    stream = {"stream": True, "stream_options": {"include_usage": True}}
    first = await pod.post("/v1/chat/completions", chat(marker, **stream))
    text = content(sse(await first.text()))
    assert first.headers["x-fb-cache"] == "miss" and text
    replay = await pod.post("/v1/chat/completions", chat(marker, **stream))
    assert replay.headers["x-fb-cache"] == "hit" and replay.headers["Content-Type"].startswith("text/event-stream")
    chunks = sse(await replay.text())
    assert content(chunks) == text
    assert chunks[-1]["x_farebox"]["cache"] == "hit" and chunks[-1]["usage"]["completion_tokens"] > 0
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "stop"
    plain = await pod.post("/v1/chat/completions", chat(marker))  # the stored stream answers a completion too
    assert plain.headers["x-fb-cache"] == "hit"
    assert (await plain.json())["choices"][0]["message"]["content"] == text
    assert await pod.upstream_calls(marker) == 1


async def test_identical_concurrent_misses_make_one_upstream_call(pod: Pod) -> None:
    marker = uuid.uuid4().hex
    slow = {"x-sim-ttft-ms": "200"}
    answers = await asyncio.gather(*(pod.post("/v1/chat/completions", chat(marker), **slow) for _ in range(100)))
    assert all(a.status == 200 for a in answers)
    assert sorted(a.headers["x-fb-cache"] for a in answers).count("hit") == 99
    assert len({(await a.json())["choices"][0]["message"]["content"] for a in answers}) == 1
    assert await pod.upstream_calls(marker) == 1


async def test_embeddings_are_cached(pod: Pod) -> None:
    marker = uuid.uuid4().hex
    body = {"model": "embed-default", "input": [f"{marker} one", f"{marker} two"]}
    first = await pod.post("/v1/embeddings", body, **{"x-fb-cache": "on"})
    again = await pod.post("/v1/embeddings", body, **{"x-fb-cache": "on"})
    assert first.headers["x-fb-cache"] == "miss" and again.headers["x-fb-cache"] == "hit"
    assert (await again.json())["data"] == (await first.json())["data"]
    assert await pod.upstream_calls(marker) == 1


@pytest.mark.parametrize(("extra", "headers", "reason"), [
    ({"temperature": 1.5}, {}, "temperature"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]}, {},
     "tool_calls"),
    ({}, {"Cache-Control": "no-store"}, "no_store"),
])
async def test_what_must_never_be_cached_is_bypassed_and_says_why(pod: Pod, extra: dict, headers: dict,
                                                                   reason: str) -> None:
    marker = uuid.uuid4().hex
    for _ in range(2):
        resp = await pod.post("/v1/chat/completions", chat(marker, **extra), **headers)
        assert resp.headers["x-fb-cache"] == "bypass" and resp.headers["x-fb-cache-reason"] == reason
    assert await pod.upstream_calls(marker) == 2


async def test_off_and_no_cache_skip_the_lookup(pod: Pod) -> None:
    marker = uuid.uuid4().hex
    await pod.post("/v1/chat/completions", chat(marker))
    off = await pod.post("/v1/chat/completions", chat(marker), **{"x-fb-cache": "off"})
    assert "x-fb-cache" not in off.headers
    fresh = await pod.post("/v1/chat/completions", chat(marker), **{"Cache-Control": "no-cache"})
    assert fresh.headers["x-fb-cache"] == "miss"
    assert await pod.upstream_calls(marker) == 3


async def test_an_alias_without_cache_is_not_cached_unless_asked(pod: Pod) -> None:
    marker = uuid.uuid4().hex
    body = {**chat(marker), "model": "chat-default"}
    first = await pod.post("/v1/chat/completions", body)
    assert "x-fb-cache" not in first.headers
    await pod.post("/v1/chat/completions", body)
    assert await pod.upstream_calls(marker) == 2
    await pod.post("/v1/chat/completions", body, **{"x-fb-cache": "on"})
    asked = await pod.post("/v1/chat/completions", body, **{"x-fb-cache": "on"})
    assert asked.headers["x-fb-cache"] == "hit" and await pod.upstream_calls(marker) == 3


async def test_a_malformed_cache_header_is_a_400_naming_it(pod: Pod) -> None:
    resp = await pod.post("/v1/chat/completions", chat(uuid.uuid4().hex), **{"x-fb-cache": "yes please"})
    body = await resp.json()
    assert resp.status == 400 and body["error"]["param"] == "x-fb-cache"
    assert "x-fb-cache" in body["error"]["message"]
    assert pod.log.events == []  # refused before admission: nothing held


async def test_a_follower_whose_caller_leaves_while_waiting_is_settled(pod: Pod) -> None:
    marker = uuid.uuid4().hex
    slow = {"x-sim-ttft-ms": "600"}
    leader = asyncio.create_task(pod.post("/v1/chat/completions", chat(marker), **slow))
    await asyncio.sleep(0.1)
    with pytest.raises(asyncio.TimeoutError):  # the caller gives up while the leader's call is in the air
        await asyncio.wait_for(pod.post("/v1/chat/completions", chat(marker), **slow), 0.2)
    assert (await leader).status == 200
    deadline = time.monotonic() + 3
    while len(pod.budgets.settled) < len(pod.budgets.asks) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert len(pod.budgets.asks) == 2 and set(pod.budgets.settled) == {a.request_id for a in pod.budgets.asks}
    statuses = sorted(e.final_status for e in pod.settled())
    assert statuses == [200, 499] and await pod.upstream_calls(marker) == 1
