"""The semantic cache in the request path: the real aiohttp app over fake ports and the in-loop simulator.

The simulator embeds texts that differ only in case, punctuation and spacing identically (any other text at
a random angle), so a rephrasing of that kind is a semantic hit and the exact cache still misses it. Upstream
calls are counted at the simulator per path (``GET /_sim/requests``); every prompt carries a fresh marker.
"""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from farebox.pod import pod_app
from infra.simulator.app import create_app as create_simulator
from infra.simulator.config import parse_config
from ledger.events import RequestAdmitted, RequestAttempted, RequestSettled
from tests.proxy.fakes import MemoryLog, ScriptedBudgets, example_tree, key, runtime, snapshot

SIMULATOR = {"accounts": [{"name": "acct-retail", "api_key": "sk-sim-openai-retail-0001"},
                          {"name": "acct-retail-anthropic", "api_key": "sk-sim-anthropic-retail-0001"}],
             "defaults": {"ttft_ms": 0, "tokens_per_s": 0, "output_tokens": 12}}
SEMANTIC = {"embeddings_alias": "embed-default", "threshold": "0.95"}
pytestmark = pytest.mark.filterwarnings("ignore::aiohttp.web_exceptions.NotAppKeyWarning")


class Pod:
    def __init__(self, client: TestClient, sim: TestClient, log: MemoryLog, budgets: ScriptedBudgets,
                 plaintext: str) -> None:
        self.client, self.sim, self.log, self.budgets = client, sim, log, budgets
        self.auth = {"Authorization": f"Bearer {plaintext}"}

    async def post(self, body: dict, **headers: str):  # type: ignore[no-untyped-def]
        return await self.client.post("/v1/chat/completions", data=orjson.dumps(body),
                                      headers={**self.auth, **headers})

    async def calls(self, marker: str) -> dict[str, int]:
        """The simulator's calls whose body carries ``marker``, by kind (chat, embeddings)."""
        data = (await (await self.sim.get("/_sim/requests", params={"n": "256"})).json())["data"]
        out = {"chat": 0, "embeddings": 0}
        for e in data:
            if marker.lower() in orjson.dumps(e.get("body")).decode().lower():
                out["embeddings" if e["path"].endswith("/embeddings") else "chat"] += 1
        return out

    def of(self, cls, request_id: str):  # type: ignore[no-untyped-def]
        return [e for e in self.log.events if isinstance(e, cls) and e.request_id == request_id]


@pytest.fixture
async def pod() -> AsyncIterator[Pod]:
    sim = TestClient(TestServer(create_simulator(parse_config(SIMULATOR))))
    await sim.start_server()
    tree = example_tree(str(sim.make_url("")).rstrip("/"))
    dead = copy.deepcopy(next(d for d in tree["deployments"] if d["id"] == "sim-embed-mumbai"))
    dead.update(id="embed-dead", base_url="http://127.0.0.1:1/v1")  # nothing listens on port 1
    local = copy.deepcopy(next(d for d in tree["deployments"] if d["id"] == "sim-openai-mumbai"))
    local.update(id="local-chat", self_hosted=True, data_classes=["public", "internal", "confidential", "restricted"])
    tree["deployments"] += [dead, local]
    tree["aliases"] += [
        {"name": "chat-faq-local", "kind": "chat", "deployments": ["local-chat"], "cache": {"semantic": SEMANTIC}},
        {"name": "embed-dead", "kind": "embeddings", "deployments": ["embed-dead"], "max_attempts": 1},
        {"name": "chat-faq", "kind": "chat", "deployments": ["sim-openai-mumbai"], "cache": {"semantic": SEMANTIC}},
        {"name": "chat-faq-down", "kind": "chat", "deployments": ["sim-openai-mumbai"],
         "cache": {"semantic": {**SEMANTIC, "embeddings_alias": "embed-dead"}}},
    ]
    plaintext, record = key()
    record["aliases"] = ["chat-faq", "chat-faq-down", "chat-faq-local"]  # not the embeddings alias: the cache uses it
    record["data_class_ceiling"] = "restricted"
    log, budgets = MemoryLog(), ScriptedBudgets()
    rt = runtime(snapshot(tree, [record]), budgets=budgets, log=log, clock=time.time)
    client = TestClient(TestServer(pod_app(rt)))
    await client.start_server()
    yield Pod(client, sim, log, budgets, plaintext)
    await client.close()
    await sim.close()


def chat(text: str, alias: str = "chat-faq", **extra: object) -> dict:
    return {"model": alias, "messages": [{"role": "system", "content": "You answer HR questions."},
                                         {"role": "user", "content": text}], "max_completion_tokens": 64,
            "temperature": 0, **extra}


def sse(text: str) -> list[dict]:
    events = [line[6:] for line in text.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [orjson.loads(e) for e in events[:-1]]


async def test_a_rephrased_question_is_a_semantic_hit_and_its_embedding_is_charged_to_the_team(pod: Pod) -> None:
    m = uuid.uuid4().hex
    first = await pod.post(chat(f"[{m}] How many days of annual leave do I get?"))
    assert first.status == 200 and first.headers["x-fb-cache"] == "miss"
    again = await pod.post(chat(f"[{m}] how many days of annual leave do I get"))
    hit = await again.json()
    assert again.status == 200, hit
    assert (again.headers["x-fb-cache"], again.headers["x-fb-cache-kind"]) == ("hit", "semantic")
    assert again.headers["x-fb-cache-similarity"] == hit["x_farebox"]["cache_similarity"] == "1.0000"
    assert hit["choices"] == (await first.json())["choices"]
    assert await pod.calls(m) == {"chat": 1, "embeddings": 2}  # every request pays for its embedding
    rid = again.headers["x-fb-request-id"]
    (served,) = pod.of(RequestSettled, rid)
    assert served.cache_hit and served.cache_kind == "semantic" and served.cache_similarity == "1.0000"
    assert served.cost_micro == 0 and served.cache_saved_micro > 0 and served.attempts == 0
    (admitted,) = pod.of(RequestAdmitted, f"{rid}.semantic")
    (caller,) = pod.of(RequestAdmitted, rid)
    assert (admitted.team, admitted.alias, admitted.key_id) == ("platform", "embed-default", caller.key_id)
    assert admitted.tags == {"fb.cache": "semantic", "fb.cache_for": rid} and admitted.run_id is None
    (attempt,) = pod.of(RequestAttempted, f"{rid}.semantic")
    (paid,) = pod.of(RequestSettled, f"{rid}.semantic")
    assert attempt.outcome == "ok" and paid.cost_micro == attempt.cost_micro > 0
    assert set(paid.cost_by_scope) == {f"key:{admitted.key_id}", "team:platform", "bu:retail"}
    assert pod.budgets.settled[f"{rid}.semantic"] == paid.cost_by_scope


async def test_a_different_question_is_a_miss_and_a_verbatim_repeat_an_exact_hit_with_no_embedding(pod: Pod) -> None:
    m = uuid.uuid4().hex
    await pod.post(chat(f"[{m}] How many days of annual leave do I get?"))
    other = await pod.post(chat(f"[{m}] Who approves my travel expenses?"))
    assert other.headers["x-fb-cache"] == "miss"
    repeat = await pod.post(chat(f"[{m}] Who approves my travel expenses?"))
    assert (repeat.headers["x-fb-cache"], repeat.headers["x-fb-cache-kind"]) == ("hit", "exact")
    assert "x-fb-cache-similarity" not in repeat.headers
    (served,) = pod.of(RequestSettled, repeat.headers["x-fb-request-id"])
    assert served.cache_kind == "exact" and served.cache_similarity is None
    assert await pod.calls(m) == {"chat": 2, "embeddings": 2}


async def test_a_stream_is_stored_and_a_semantic_hit_replayed_as_a_stream(pod: Pod) -> None:
    m = uuid.uuid4().hex
    stream = {"stream": True, "stream_options": {"include_usage": True}}
    first = await pod.post(chat(f"[{m}] Where do I find my payslip?", **stream))
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in sse(await first.text()) if c["choices"])
    replay = await pod.post(chat(f"[{m}] where do I find my PAYSLIP", **stream))
    assert replay.headers["x-fb-cache-kind"] == "semantic"
    assert replay.headers["Content-Type"].startswith("text/event-stream")
    chunks = sse(await replay.text())
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == text != ""
    assert chunks[-1]["x_farebox"]["cache_kind"] == "semantic" and chunks[-1]["usage"]["completion_tokens"] > 0
    assert (await pod.calls(m))["chat"] == 1


async def test_an_unreachable_embeddings_deployment_is_a_miss_never_an_error(pod: Pod) -> None:
    m = uuid.uuid4().hex
    for text in (f"[{m}] Can I carry leave over?", f"[{m}] can I carry leave over"):
        resp = await pod.post(chat(text, alias="chat-faq-down"))
        assert resp.status == 200 and resp.headers["x-fb-cache"] == "miss"
    assert (await pod.calls(m))["chat"] == 2
    failed = [e for e in pod.log.events if isinstance(e, RequestSettled) and e.request_id.endswith(".semantic")]
    assert len(failed) == 2 and all(e.final_status != 200 and e.cost_micro == 0 for e in failed)


@pytest.mark.parametrize(("extra", "headers", "reason"), [
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]}, {},
     "tool_calls"),
    ({"temperature": 1.5}, {}, "temperature"),
    ({}, {"Cache-Control": "no-store"}, "no_store"),
    ({}, {"x-fb-cache": "off"}, None),
    ({"model": "chat-faq-local"}, {"x-fb-data-class": "restricted"}, "restricted"),
])
async def test_what_the_cache_may_not_serve_is_never_embedded(pod: Pod, extra: dict, headers: dict,
                                                              reason: str | None) -> None:
    m = uuid.uuid4().hex
    for text in (f"[{m}] What is the notice period?", f"[{m}] what is the notice period"):
        resp = await pod.post(chat(text, **extra), **headers)
        assert resp.status == 200 and resp.headers.get("x-fb-cache-reason") == reason
    assert await pod.calls(m) == {"chat": 2, "embeddings": 0}


async def test_no_cache_embeds_and_stores_without_reading(pod: Pod) -> None:
    m = uuid.uuid4().hex
    await pod.post(chat(f"[{m}] Is there a gym at the office?"))
    fresh = await pod.post(chat(f"[{m}] is there a gym at the office"), **{"Cache-Control": "no-cache"})
    assert fresh.headers["x-fb-cache"] == "miss"
    later = await pod.post(chat(f"[{m}] Is there a gym at the office!!"))
    assert later.headers["x-fb-cache-kind"] == "semantic"
    assert await pod.calls(m) == {"chat": 2, "embeddings": 3}


async def test_a_different_system_prompt_is_another_namespace(pod: Pod) -> None:
    m = uuid.uuid4().hex
    await pod.post(chat(f"[{m}] What are the office hours?"))
    body = chat(f"[{m}] what are the office hours")
    body["messages"][0]["content"] = "You answer IT questions."
    assert (await pod.post(body)).headers["x-fb-cache"] == "miss"
    assert (await pod.calls(m))["chat"] == 2
