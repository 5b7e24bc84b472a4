"""The fast spend bucket through the real chat handler: the hold is drawn at admission, the actual
cost is what stays drawn after settlement, and a short bucket is a 429 before any upstream byte."""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from farebox.pod import pod_app
from infra.simulator.app import create_app as create_simulator
from infra.simulator.config import parse_config
from proxy.admission.spend_rate import spend_draws
from proxy.limits import MemoryBuckets
from tests.proxy.api.test_chat_shell import CHAT, SIMULATOR
from tests.proxy.fakes import MemoryLog, example_tree, key, runtime, snapshot

pytestmark = pytest.mark.filterwarnings("ignore::aiohttp.web_exceptions.NotAppKeyWarning")


async def test_the_bucket_keeps_the_actual_cost_and_refuses_when_short() -> None:
    sim = TestServer(create_simulator(parse_config(SIMULATOR)))
    await sim.start_server()
    tree = example_tree(str(sim.make_url("")).rstrip("/"))
    tree["budgets"]["scopes"].append({"scope": "team:platform", "spend_per_hour": "0.05"})
    plaintext, record = key()
    snap = snapshot(tree, [record])
    buckets, log = MemoryBuckets(), MemoryLog()
    frozen = time.time()  # the bucket refills with time: a still clock keeps the drawn amount exact
    rt = runtime(snap, limits=buckets, log=log, clock=lambda: frozen)
    client = TestClient(TestServer(pod_app(rt)))
    await client.start_server()
    auth = {"Authorization": f"Bearer {plaintext}"}
    try:
        small = {**CHAT, "max_completion_tokens": 16}
        resp = await client.post("/v1/chat/completions", data=orjson.dumps(small), headers=auth)
        body = await resp.json()
        assert resp.status == 200, body
        cost = body["x_farebox"]["cost_micro"]
        admitted = log.events[0]
        (draw,) = spend_draws(snap, snap.keys[record["hash"]], admitted.holds["team:platform"])
        actual = -(-cost // draw.quantum)
        deadline = time.monotonic() + 10  # rate-limit settlement runs in the background: wait for it
        while (left := await buckets.peek(draw.spec, rt.now_us())) != draw.spec.capacity - actual \
                and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert draw.spec.capacity - left == actual  # the actual cost, not the hold
        big = {**CHAT, "max_completion_tokens": 4000}
        refused = await client.post("/v1/chat/completions", data=orjson.dumps(big), headers=auth)
        err = (await refused.json())["error"]
        assert refused.status == 429 and err["code"] == "spend_rate_exceeded"
        assert len(log.events) == 3  # the refusal recorded nothing
    finally:
        await client.close()
        await sim.close()
