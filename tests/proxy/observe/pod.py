"""An in-process pod over the embedded budget adapter (a live ledger) and the simulator, for the
observability tests: the real aiohttp app, metrics, access log and (when given) tracing.

Its ``chat-failover`` alias puts ``sim-dead`` (a closed port, breaker opening after two failures) first,
so a request there fails over to ``sim-openai-mumbai``: attempts of two outcomes, a fallback, an open breaker.
"""

from __future__ import annotations

import copy
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from zoneinfo import ZoneInfo

import orjson
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from farebox.pod import pod_app
from infra.simulator.app import create_app as create_simulator
from infra.simulator.config import parse_config
from ledger.balances import Ledger
from proxy.admission.budgets import LedgerBudgets
from tests.proxy.fakes import MemoryLog, example_tree, key, runtime, snapshot

SIMULATOR = {"accounts": [{"name": "acct-retail", "api_key": "sk-sim-openai-retail-0001"},
                          {"name": "acct-retail-anthropic", "api_key": "sk-sim-anthropic-retail-0001"}],
             "defaults": {"ttft_ms": 5, "tokens_per_s": 0, "output_tokens": 12}}
CHAT = {"model": "chat-default", "messages": [{"role": "user", "content": "Say hello."}], "max_completion_tokens": 64}


class Pod:
    def __init__(self, client: TestClient, log: MemoryLog, rt: Any, plaintext: str, seen: list) -> None:
        self.client, self.log, self.rt = client, log, rt
        self.auth = {"Authorization": f"Bearer {plaintext}"}
        self.upstream_headers = seen  # headers of every request the simulator received

    async def post(self, body: dict, **headers: str):  # type: ignore[no-untyped-def]
        return await self.client.post("/v1/chat/completions", data=orjson.dumps(body),
                                      headers={**self.auth, **headers})


def _tree(sim_url: str) -> dict:
    tree = example_tree(sim_url)
    dead = copy.deepcopy(next(d for d in tree["deployments"] if d["id"] == "sim-openai-mumbai"))
    dead.update(id="sim-dead", base_url="http://127.0.0.1:9/v1", weight=1_000_000,
                breaker={"error_pct": 20, "min_requests": 2, "window_s": 30, "cooldown_s": 60, "max_cooldown_s": 60})
    tree["deployments"].append(dead)
    tree["aliases"].append({"name": "chat-failover", "kind": "chat", "deployments": ["sim-dead", "sim-openai-mumbai"],
                            "max_attempts": 2, "backoff_s": 0})
    for dep in tree["deployments"]:
        dep["weight"] = dep.get("weight", 1)
    return tree


@asynccontextmanager
async def running_pod(tracing: Any = None) -> AsyncIterator[Pod]:
    seen: list = []

    @web.middleware
    async def record_headers(request: web.Request, handler):  # type: ignore[no-untyped-def]
        seen.append({k.lower(): v for k, v in request.headers.items()})
        return await handler(request)

    simulator = create_simulator(parse_config(SIMULATOR))
    simulator.middlewares.append(record_headers)
    sim = TestServer(simulator)
    await sim.start_server()
    plaintext, record = key()
    record["aliases"] = ["chat-default", "chat-failover", "embed-default"]
    snap = snapshot(_tree(str(sim.make_url("")).rstrip("/")), [record])
    budgets = LedgerBudgets(Ledger(ZoneInfo(snap.budgets.timezone)))
    log = MemoryLog()
    rt = runtime(snap, budgets=budgets, log=log, fold=budgets.fold, clock=time.time)
    rt.metrics.state.queue_depth = budgets.queue.depth  # as farebox/wiring.py does
    rt.metrics.state.budget_use = lambda: budgets.usage(rt.snapshot, rt.clock())
    client = TestClient(TestServer(pod_app(rt, tracing=tracing)))
    await client.start_server()
    try:
        yield Pod(client, log, rt, plaintext, seen)
    finally:
        await client.close()
        await sim.close()
