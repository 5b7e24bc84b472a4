"""Cost allocation in process: the key's cost centre and the caller's ``x-fb-tags`` reach ``request.admitted``
(chat and embeddings), and a bad tags header is an OpenAI-shaped 400 before anything is held or recorded."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from farebox.pod import pod_app
from infra.simulator.app import create_app as create_simulator
from infra.simulator.config import parse_config
from ledger.codec import decode, encode
from tests.proxy.fakes import MemoryLog, ScriptedBudgets, example_tree, key, runtime, snapshot

SIMULATOR = {"accounts": [{"name": "acct-retail", "api_key": "sk-sim-openai-retail-0001"},
                          {"name": "acct-retail-anthropic", "api_key": "sk-sim-anthropic-retail-0001"}],
             "defaults": {"ttft_ms": 0, "tokens_per_s": 0, "output_tokens": 12}}
pytestmark = pytest.mark.filterwarnings("ignore::aiohttp.web_exceptions.NotAppKeyWarning")

CHAT = {"model": "chat-default", "messages": [{"role": "user", "content": "Say hello."}], "max_completion_tokens": 64}


class Pod:
    def __init__(self, client: TestClient, log: MemoryLog, budgets: ScriptedBudgets, keys: dict[str, str]) -> None:
        self.client, self.log, self.budgets, self.keys = client, log, budgets, keys

    async def post(self, path: str, body: dict, app: str = "playground", **headers: str):  # type: ignore[no-untyped-def]
        auth = {"Authorization": f"Bearer {self.keys[app]}"}
        return await self.client.post(path, data=orjson.dumps(body), headers={**auth, **headers})


@pytest.fixture
async def pod() -> AsyncIterator[Pod]:
    sim = TestServer(create_simulator(parse_config(SIMULATOR)))
    await sim.start_server()
    tree = example_tree(str(sim.make_url("")).rstrip("/"))
    tree["apps"].append({"name": "atlas", "team": "platform", "cost_centre": "CC-1077"})
    (playground, p_rec), (atlas, a_rec) = key(), key(app="atlas")
    log, budgets = MemoryLog(), ScriptedBudgets()
    rt = runtime(snapshot(tree, [p_rec, a_rec]), budgets=budgets, log=log, clock=time.time)
    client = TestClient(TestServer(pod_app(rt)))
    await client.start_server()
    yield Pod(client, log, budgets, {"playground": playground, "atlas": atlas})
    await client.close()
    await sim.close()


async def test_the_team_cost_centre_and_the_tags_are_on_the_admission(pod: Pod) -> None:
    resp = await pod.post("/v1/chat/completions", CHAT, **{"x-fb-tags": "project=atlas, env=prod"})
    assert resp.status == 200, await resp.text()
    admitted = pod.log.events[0]
    assert admitted.type == "request.admitted"
    assert admitted.cost_centre == "CC-1001"  # the team's: playground names none
    assert dict(admitted.tags) == {"project": "atlas", "env": "prod"} and admitted.retry_of is None
    assert decode(encode(admitted)) == admitted


async def test_the_app_cost_centre_overrides_the_team_and_no_header_means_no_tags(pod: Pod) -> None:
    resp = await pod.post("/v1/embeddings", {"model": "embed-default", "input": "hello"}, app="atlas")
    assert resp.status == 200, await resp.text()
    admitted = pod.log.events[0]
    assert (admitted.cost_centre, dict(admitted.tags)) == ("CC-1077", {})


@pytest.mark.parametrize("header", ["project", "a=b," * 11, "k=v,k=w", "project=at las"])
async def test_a_bad_tags_header_is_a_400_before_anything_is_held(pod: Pod, header: str) -> None:
    resp = await pod.post("/v1/chat/completions", CHAT, **{"x-fb-tags": header})
    body = await resp.json()
    assert resp.status == 400, body
    assert body["error"]["param"] == "x-fb-tags" and body["error"]["code"] == "invalid_tags"
    assert body["error"]["type"] == "invalid_request_error"
    assert pod.log.events == [] and pod.budgets.asks == []


async def test_cost_centres_and_tags_reach_the_focus_export(pod: Pod, tmp_path) -> None:
    """Gateway -> request events -> archive -> FOCUS: each request's rows carry its cost centre and tags."""
    import csv
    from datetime import datetime, timezone

    from reconcile.focus.export import export_focus
    from streams.archive.write import ArchiveWriter, Record

    assert (await pod.post("/v1/chat/completions", CHAT, **{"x-fb-tags": "project=atlas,env=prod"})).status == 200
    assert (await pod.post("/v1/chat/completions", CHAT, app="atlas")).status == 200
    events = pod.log.events
    assert [e.type for e in events].count("request.settled") == 2
    now = datetime.now(timezone.utc)
    ArchiveWriter(tmp_path / "archive", "log").write(
        [Record(0, n + 1, encode(e)) for n, e in enumerate(events)], now=now)
    snap = snapshot(example_tree())  # the pod's price book and FX (only base URLs differ)
    month = min(e.time for e in events).strftime("%Y-%m")
    export_focus(tmp_path / "archive", month, snap.price_book, snap.fx, tmp_path / "focus.csv", currency=snap.currency)
    with open(tmp_path / "focus.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    by_app = {(r["x_app"], r["x_cost_centre"], r["Tags"]) for r in rows}
    assert by_app == {("playground", "CC-1001", '{"env":"prod","project":"atlas"}'), ("atlas", "CC-1077", "{}")}
    # the deployment's account and project (examples/farebox.yaml) are the billing account and sub-account
    for r in rows:
        dep = snap.deployments[r["ResourceId"]]
        assert (r["BillingAccountId"], r["SubAccountId"]) == (dep.account, dep.project or ""), r
