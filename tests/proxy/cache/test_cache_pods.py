"""Distributed mode's cache: two gateway pods sharing one real Redis; what one fetched, the other serves."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from farebox.pod import pod_app
from infra.simulator.app import create_app as create_simulator
from infra.simulator.config import parse_config
from proxy.cache.redis_cache import RedisCache
from tests.proxy.fakes import MemoryLog, example_tree, key, runtime, snapshot

SIMULATOR = {"accounts": [{"name": "acct-retail", "api_key": "sk-sim-openai-retail-0001"},
                          {"name": "acct-retail-anthropic", "api_key": "sk-sim-anthropic-retail-0001"}],
             "defaults": {"ttft_ms": 0, "tokens_per_s": 0, "output_tokens": 12}}
pytestmark = pytest.mark.filterwarnings("ignore::aiohttp.web_exceptions.NotAppKeyWarning")


@pytest.fixture
async def pods(cache_redis) -> AsyncIterator[tuple[list[TestClient], TestClient, dict[str, str]]]:
    sim = TestClient(TestServer(create_simulator(parse_config(SIMULATOR))))
    await sim.start_server()
    tree = example_tree(str(sim.make_url("")).rstrip("/"))
    plaintext, record = key()
    snap = snapshot(tree, [record])
    prefix = f"t:{uuid.uuid4().hex[:8]}:"
    clients, caches = [], []
    for _ in range(2):
        cache = RedisCache.from_url(cache_redis.url, key_prefix=prefix, timeout_s=1.0)
        rt = dataclasses.replace(runtime(snap, log=MemoryLog(), clock=time.time), cache=cache)
        client = TestClient(TestServer(pod_app(rt)))
        await client.start_server()
        clients.append(client)
        caches.append(cache)
    yield clients, sim, {"Authorization": f"Bearer {plaintext}", "x-fb-cache": "on"}
    for client, cache in zip(clients, caches):
        await client.close()
        await cache.close()
    await sim.close()


async def test_an_answer_fetched_on_one_pod_is_a_hit_on_the_other(pods) -> None:  # type: ignore[no-untyped-def]
    (a, b), sim, headers = pods
    marker = uuid.uuid4().hex
    body = orjson.dumps({"model": "chat-default", "messages": [{"role": "user", "content": f"[{marker}] hi"}],
                         "max_completion_tokens": 32, "temperature": 0})
    first = await a.post("/v1/chat/completions", data=body, headers=headers)
    second = await b.post("/v1/chat/completions", data=body, headers=headers)
    assert (first.headers["x-fb-cache"], second.headers["x-fb-cache"]) == ("miss", "hit")
    assert (await second.json())["choices"] == (await first.json())["choices"]
    received = (await (await sim.get("/_sim/requests", params={"n": "50"})).json())["data"]
    assert sum(1 for e in received if marker in orjson.dumps(e.get("body")).decode()) == 1
