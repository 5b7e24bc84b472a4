"""Accounts and auth, the usage export ("provider invoice"), stats, runtime profiles, reset."""

from __future__ import annotations

import csv
import io
import time

import orjson

from tests.infra.sim_helpers import OA, chat_body, msg_body

ACCOUNTS = {"accounts": [{"name": "acme", "api_key": "sk-acme-secret-1"},
                         {"name": "globex", "api_key": "sk-globex-secret-2"}]}


async def test_auth_per_dialect_never_echoes_key(make_sim):
    sim = await make_sim(ACCOUNTS)
    bad = "sk-wrong-key-do-not-echo"
    resp = await sim.post("/v1/chat/completions", json=chat_body(), headers={"Authorization": f"Bearer {bad}"})
    text = await resp.text()
    assert resp.status == 401 and bad not in text and orjson.loads(text)["error"]["code"] == "invalid_api_key"
    resp = await sim.post("/v1/chat/completions", json=chat_body())
    assert resp.status == 401
    resp = await sim.post("/v1/messages", json=msg_body(), headers={"x-api-key": bad, "anthropic-version": "1"})
    text = await resp.text()
    assert resp.status == 401 and bad not in text
    assert orjson.loads(text)["error"]["type"] == "authentication_error"
    resp = await sim.post("/v1/embeddings", json={"model": "e", "input": "x"}, headers={"Authorization": "Bearer x"})
    assert resp.status == 401
    ok = await sim.post("/v1/chat/completions", json=chat_body(), headers={"Authorization": "Bearer sk-acme-secret-1"})
    assert ok.status == 200
    st = (await (await sim.get("/_sim/stats")).json())["models"]
    assert st["gpt-sim"]["outcomes"] == {"unauthorized": 2, "ok": 1}
    assert (await (await sim.get("/v1/usage/export")).json())["data"][0]["account"] == "acme"


async def test_any_key_without_accounts_is_default(sim):
    await sim.post("/v1/chat/completions", json=chat_body(), headers={"Authorization": "Bearer anything"})
    assert (await (await sim.get("/v1/usage/export?account=default")).json())["data"][0]["requests"] == 1


async def test_usage_export_by_account_day_model(make_sim, tmp_path):
    path = tmp_path / "billing.jsonl"
    sim = await make_sim({**ACCOUNTS, "billing_file": str(path)})
    acme = {"Authorization": "Bearer sk-acme-secret-1", "x-sim-cached-tokens": "3", "x-sim-reasoning-tokens": "4"}
    globex = {"x-api-key": "sk-globex-secret-2", "anthropic-version": "2023-06-01", "x-sim-cache-write-tokens": "2"}
    for _ in range(2):
        await sim.post("/v1/chat/completions", json=chat_body(), headers=acme)
    await sim.post("/v1/chat/completions", json=chat_body(stream=True), headers=acme)
    await sim.post("/v1/messages", json=msg_body(), headers=globex)
    await sim.post("/v1/embeddings", json={"model": "emb", "input": ["a b", "c"]}, headers=acme)
    await sim.post("/v1/chat/completions", json=chat_body(), headers={**acme, "x-sim-fault": "429"})  # not billed
    today = time.strftime("%Y-%m-%d", time.gmtime())
    out = await (await sim.get(f"/v1/usage/export?account=acme&date={today}")).json()
    assert out["account"] == "acme" and out["date"] == today
    rows = {r["model"]: r for r in out["data"]}
    assert rows["gpt-sim"] == {"account": "acme", "date": today, "model": "gpt-sim", "requests": 3,
                               "input": 3 * 5, "cached_input": 3 * 3, "cache_write": 0, "output": 3 * 32,
                               "reasoning": 3 * 4}
    assert rows["emb"]["input"] == 3 and rows["emb"]["output"] == 0
    globex_rows = (await (await sim.get("/v1/usage/export?account=globex")).json())["data"]
    assert globex_rows == [{"account": "globex", "date": today, "model": "claude-sim", "requests": 1,
                            "input": 6, "cached_input": 0, "cache_write": 2, "output": 32, "reasoning": 0}]
    assert (await (await sim.get("/v1/usage/export?account=acme&date=2001-01-01")).json())["data"] == []
    resp = await sim.get("/v1/usage/export?format=csv")
    assert resp.headers["Content-Type"].startswith("text/csv")
    table = list(csv.DictReader(io.StringIO(await resp.text())))
    assert [(r["account"], r["model"], r["requests"]) for r in table] == [
        ("acme", "emb", "1"), ("acme", "gpt-sim", "3"), ("globex", "claude-sim", "1")]
    lines = [orjson.loads(ln) for ln in path.read_bytes().splitlines()]
    assert len(lines) == 5 and {ln["account"] for ln in lines} == {"acme", "globex"}
    assert (await sim.get("/v1/usage/export?date=yesterday")).status == 400


async def test_runtime_profile_change_and_reset(sim):
    resp = await sim.post("/_sim/models/gpt-sim", json={"output_tokens": 5, "faults": {"rate_503": 1.0}})
    prof = (await resp.json())["profile"]
    assert resp.status == 200 and prof["output_tokens"] == 5 and prof["faults"]["rate_503"] == 1.0
    assert (await sim.post("/v1/chat/completions", json=chat_body(), headers=OA)).status == 503
    other = await (await sim.post("/v1/chat/completions", json={**chat_body(), "model": "other"}, headers=OA)).json()
    assert other["usage"]["completion_tokens"] == 32
    await sim.post("/_sim/models/gpt-sim", json={"faults": {"rate_503": 0.0}})
    out = await (await sim.post("/v1/chat/completions", json=chat_body(), headers=OA)).json()
    assert out["usage"]["completion_tokens"] == 5
    assert (await (await sim.get("/_sim/models/gpt-sim")).json())["profile"]["output_tokens"] == 5
    bad = await sim.post("/_sim/models/gpt-sim", json={"output_tokens": -1, "ttft": 3, "faults": {"rate_429": 2}})
    errors = (await bad.json())["error"]["errors"]
    assert bad.status == 400 and len(errors) == 3 and any("profile.faults.rate_429" in e for e in errors)
    assert (await (await sim.get("/_sim/stats")).json())["totals"]["requests"] == 3
    assert (await sim.post("/_sim/reset")).status == 200
    assert (await (await sim.get("/_sim/stats")).json())["totals"]["requests"] == 0
    assert (await (await sim.get("/v1/usage/export")).json())["data"] == []
    assert (await (await sim.get("/_sim/models/gpt-sim")).json())["profile"]["output_tokens"] == 32


async def test_health(sim):
    resp = await sim.get("/_sim/health")
    assert resp.status == 200 and (await resp.json()) == {"status": "ok"}
