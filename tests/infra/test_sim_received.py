"""GET /_sim/requests: the last n bodies the simulator received, bounded, cleared by reset, no headers kept."""

from __future__ import annotations

from infra.simulator.received import ReceivedLog
from tests.infra.sim_helpers import AN, OA, chat_body, msg_body


async def test_last_n_bodies_oldest_first(sim):
    for i in range(3):
        assert (await sim.post("/v1/chat/completions", json=chat_body(f"hello {i}"), headers=OA)).status == 200
    await sim.post("/v1/messages", json=msg_body("to claude"), headers=AN)
    await sim.post("/v1/embeddings", json={"model": "emb", "input": "vec me"}, headers=OA)
    resp = await sim.get("/_sim/requests?n=3")
    data = (await resp.json())["data"]
    assert resp.status == 200
    assert [d["path"] for d in data] == ["/v1/chat/completions", "/v1/messages", "/v1/embeddings"]
    assert data[0]["body"]["messages"][0]["content"] == "hello 2"
    assert data[1]["body"]["messages"][0]["content"] == "to claude"
    assert data[2]["body"]["input"] == "vec me"
    assert len((await (await sim.get("/_sim/requests")).json())["data"]) == 5  # n defaults to 10
    assert "sk-test" not in await (await sim.get("/_sim/requests?n=10")).text()


async def test_non_json_body_is_recorded_as_null(sim):
    await sim.post("/v1/chat/completions", data=b"not json", headers=OA)
    data = (await (await sim.get("/_sim/requests?n=1")).json())["data"]
    assert data == [{"seq": 1, "path": "/v1/chat/completions", "body": None}]


async def test_reset_clears(sim):
    await sim.post("/v1/chat/completions", json=chat_body(), headers=OA)
    assert (await sim.post("/_sim/reset")).status == 200
    assert (await (await sim.get("/_sim/requests?n=10")).json())["data"] == []


async def test_bad_n_is_400_naming_it(sim):
    for bad in ("0", "-1", "x", "100000"):
        resp = await sim.get(f"/_sim/requests?n={bad}")
        assert resp.status == 400 and (await resp.json())["error"]["param"] == "n"


def test_ring_is_bounded():
    log = ReceivedLog(capacity=3)
    for i in range(5):
        log.record("/p", {"i": i})
    assert [e["body"]["i"] for e in log.last(10)] == [2, 3, 4]
    assert [e["seq"] for e in log.last(2)] == [4, 5]
