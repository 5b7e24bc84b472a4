"""Distributed mode's semantic cache: two gateway pods sharing one real Redis; what one fetched, the other
serves to a rephrased question (the simulator embeds texts that differ only in case and punctuation alike)."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from farebox.pod import pod_app
from infra.redis.server import RedisServer
from infra.simulator.app import create_app as create_simulator
from infra.simulator.config import parse_config
from proxy.cache.redis_cache import RedisCache
from proxy.cache.vector_redis import RedisVectors
from tests.proxy.fakes import MemoryLog, example_tree, key, runtime, snapshot

SIMULATOR = {"accounts": [{"name": "acct-retail", "api_key": "sk-sim-openai-retail-0001"}],
             "defaults": {"ttft_ms": 0, "tokens_per_s": 0, "output_tokens": 12}}
pytestmark = pytest.mark.filterwarnings("ignore::aiohttp.web_exceptions.NotAppKeyWarning")


@pytest.fixture
async def pods(cache_redis: RedisServer) -> AsyncIterator[tuple[list[TestClient], TestClient, dict[str, str]]]:
    sim = TestClient(TestServer(create_simulator(parse_config(SIMULATOR))))
    await sim.start_server()
    tree = example_tree(str(sim.make_url("")).rstrip("/"))
    tree["aliases"].append({"name": "chat-faq", "kind": "chat", "deployments": ["sim-openai-mumbai"],
                            "cache": {"semantic": {"embeddings_alias": "embed-default", "threshold": "0.95"}}})
    plaintext, record = key()
    record["aliases"] = ["chat-faq"]
    snap = snapshot(tree, [record])
    prefix = f"t:{uuid.uuid4().hex[:8]}:"
    clients, stores = [], []
    for _ in range(2):
        cache = RedisCache.from_url(cache_redis.url, key_prefix=prefix, timeout_s=1.0)
        vectors = RedisVectors.from_url(cache_redis.url, key_prefix=prefix + "sem:", timeout_s=1.0)
        rt = dataclasses.replace(runtime(snap, log=MemoryLog(), clock=time.time), cache=cache, vectors=vectors)
        client = TestClient(TestServer(pod_app(rt)))
        await client.start_server()
        clients.append(client)
        stores += [cache, vectors]
    yield clients, sim, {"Authorization": f"Bearer {plaintext}"}
    for client in clients:
        await client.close()
    for store in stores:
        await store.close()
    await sim.close()


def ask(text: str) -> bytes:
    return orjson.dumps({"model": "chat-faq", "messages": [{"role": "user", "content": text}],
                         "max_completion_tokens": 32, "temperature": 0})


async def test_an_answer_fetched_on_one_pod_is_a_semantic_hit_on_the_other(pods) -> None:  # type: ignore[no-untyped-def]
    (a, b), sim, headers = pods
    m = uuid.uuid4().hex
    first = await a.post("/v1/chat/completions", data=ask(f"[{m}] How do I reset my VPN password?"), headers=headers)
    second = await b.post("/v1/chat/completions", data=ask(f"[{m}] how do I reset my vpn password"), headers=headers)
    assert first.headers["x-fb-cache"] == "miss"
    assert (second.headers["x-fb-cache"], second.headers["x-fb-cache-kind"]) == ("hit", "semantic")
    assert (await second.json())["choices"] == (await first.json())["choices"]
    received = (await (await sim.get("/_sim/requests", params={"n": "50"})).json())["data"]
    chats = [e for e in received if m in orjson.dumps(e.get("body")).decode() and "chat" in e["path"]]
    assert len(chats) == 1
