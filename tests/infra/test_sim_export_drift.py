"""Drift injected into one account's usage export: a scale factor, an extra token type, reset."""

from __future__ import annotations

import csv
import io
import time
from decimal import Decimal

from infra.simulator.export_drift import scale
from tests.infra.sim_helpers import chat_body

ACCOUNTS = {"accounts": [{"name": "acme", "api_key": "sk-acme-secret-1"},
                         {"name": "globex", "api_key": "sk-globex-secret-2"}]}
ACME = {"Authorization": "Bearer sk-acme-secret-1", "x-sim-cached-tokens": "3", "x-sim-reasoning-tokens": "4"}
GLOBEX = {"Authorization": "Bearer sk-globex-secret-2"}


async def _traffic(sim) -> None:
    for _ in range(3):
        assert (await sim.post("/v1/chat/completions", json=chat_body(), headers=ACME)).status == 200
    assert (await sim.post("/v1/chat/completions", json=chat_body(), headers=GLOBEX)).status == 200


async def _export(sim, account: str) -> list[dict]:
    return (await (await sim.get(f"/v1/usage/export?account={account}")).json())["data"]


def test_scale_rounds_to_the_nearest_token_halves_up():
    assert scale(100, Decimal("0.97")) == 97
    assert scale(15, Decimal("0.97")) == 15  # 14.55
    assert scale(96, Decimal("0.97")) == 93  # 93.12
    assert scale(5, Decimal("0.5")) == 3  # 2.5, half up
    assert scale(0, Decimal("3")) == 0


async def test_export_factor_scales_only_that_accounts_tokens(make_sim):
    sim = await make_sim(ACCOUNTS)
    await _traffic(sim)
    true_acme, true_globex = await _export(sim, "acme"), await _export(sim, "globex")
    assert true_acme[0]["input"] == 15 and true_acme[0]["output"] == 96
    resp = await sim.post("/_sim/accounts/acme", json={"export_factor": "0.97"})
    assert resp.status == 200
    assert (await resp.json())["drift"] == {"export_factor": "0.97", "extra_token_type": None,
                                            "extra_tokens_per_request": 10}
    (row,) = await _export(sim, "acme")
    # 15 x 0.97 = 14.55 -> 15; 9 x 0.97 = 8.73 -> 9; 96 x 0.97 = 93.12 -> 93; 12 x 0.97 = 11.64 -> 12
    assert {k: row[k] for k in ("requests", "input", "cached_input", "cache_write", "output", "reasoning")} == {
        "requests": 3, "input": 15, "cached_input": 9, "cache_write": 0, "output": 93, "reasoning": 12}
    assert await _export(sim, "globex") == true_globex
    await sim.post("/_sim/accounts/acme", json={"export_factor": "0.5"})
    (row,) = await _export(sim, "acme")
    assert (row["input"], row["output"]) == (8, 48)  # 7.5 -> 8 (half up), 48
    assert (await (await sim.get("/_sim/stats")).json())["totals"]["requests"] == 4  # billing itself untouched


async def test_extra_token_type_appears_in_json_and_csv(make_sim):
    sim = await make_sim(ACCOUNTS)
    await _traffic(sim)
    resp = await sim.post("/_sim/accounts/acme", json={"extra_token_type": "input_audio",
                                                       "extra_tokens_per_request": 7})
    assert resp.status == 200
    (row,) = await _export(sim, "acme")
    assert row["input_audio"] == 21 and row["input"] == 15  # 7 x 3 requests; nothing else changed
    assert "input_audio" not in (await _export(sim, "globex"))[0]
    table = list(csv.DictReader(io.StringIO(await (await sim.get("/v1/usage/export?format=csv")).text())))
    assert [(r["account"], r["input_audio"]) for r in table] == [("acme", "21"), ("globex", "0")]
    await sim.post("/_sim/accounts/acme", json={"extra_token_type": None})
    assert "input_audio" not in (await _export(sim, "acme"))[0]


async def test_reset_clears_drift(make_sim):
    sim = await make_sim(ACCOUNTS)
    await sim.post("/_sim/accounts/acme", json={"export_factor": "0.97", "extra_token_type": "web_search"})
    assert (await sim.post("/_sim/reset")).status == 200
    got = await (await sim.get("/_sim/accounts/acme")).json()
    assert got == {"account": "acme", "drift": {"export_factor": "1", "extra_token_type": None,
                                                "extra_tokens_per_request": 10}}
    await _traffic(sim)
    (row,) = await _export(sim, "acme")
    assert row["output"] == 96 and "web_search" not in row


async def test_bad_drift_is_refused_with_every_problem(make_sim):
    sim = await make_sim(ACCOUNTS)
    resp = await sim.post("/_sim/accounts/acme", json={"export_factor": 0.97, "extra_token_type": "input",
                                                       "extra_tokens_per_request": -1, "colour": "red"})
    assert resp.status == 400
    errors = (await resp.json())["error"]["errors"]
    assert errors == ["drift.colour: unknown field",
                      'drift.export_factor: must be a decimal string >= 0 such as "0.97"',
                      "drift.extra_token_type: 'input' is already a column of the export",
                      "drift.extra_tokens_per_request: must be an integer >= 0"]
    for body in ({"export_factor": "-1"}, {"export_factor": "NaN"}, {"export_factor": "abc"},
                 {"extra_token_type": "Audio Tokens"}, [1]):
        assert (await sim.post("/_sim/accounts/acme", json=body)).status == 400, body
    assert (await sim.post("/_sim/accounts/acme", data=b"{nope")).status == 400
    assert (await (await sim.get("/_sim/accounts/acme")).json())["drift"]["export_factor"] == "1"  # unchanged
    missing = await sim.post("/_sim/accounts/initech", json={"export_factor": "0.9"})
    assert missing.status == 404 and (await missing.json())["error"]["param"] == "account"


async def test_without_configured_accounts_the_default_account_drifts(sim):
    await sim.post("/v1/chat/completions", json=chat_body(), headers={"Authorization": "Bearer anything"})
    assert (await sim.post("/_sim/accounts/default", json={"export_factor": "2"})).status == 200
    today = time.strftime("%Y-%m-%d", time.gmtime())
    (row,) = (await (await sim.get(f"/v1/usage/export?account=default&date={today}")).json())["data"]
    assert row["output"] == 64
    assert (await sim.post("/_sim/accounts/acme", json={"export_factor": "2"})).status == 404
