"""The fetch helpers against a running simulator (drift injected) and a paginating admin API stand-in."""

from __future__ import annotations

from datetime import date, datetime, timezone
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from infra.simulator.app import create_app
from infra.simulator.config import parse_config
from reconcile.drift import OurUsage, compare_tokens
from reconcile.exports import parse_anthropic_usage, parse_openai_usage, parse_simulator_csv, parse_simulator_export
from reconcile.exports.fetch import (
    ExportFetchError,
    fetch_anthropic_usage,
    fetch_openai_costs,
    fetch_openai_usage,
    fetch_simulator_export,
)

FIXTURES = Path(__file__).parent / "fixtures"
ACCOUNTS = {"accounts": [{"name": "acme", "api_key": "sk-acme-1"}, {"name": "globex", "api_key": "sk-globex-2"}]}
ADMIN_KEY = "sk-admin-do-not-log-me"


@pytest.fixture
async def sim():
    server = TestServer(create_app(parse_config(ACCOUNTS)))
    await server.start_server()
    async with aiohttp.ClientSession() as session:
        yield server, session
    await server.close()


async def _chat(session: aiohttp.ClientSession, base: str, key: str) -> None:
    body = {"model": "gpt-sim", "messages": [{"role": "user", "content": "Hello there, simulator!"}]}
    async with session.post(f"{base}/v1/chat/completions", json=body, headers={
            "Authorization": f"Bearer {key}", "x-sim-cached-tokens": "3"}) as resp:
        assert resp.status == 200


def _ours(rows) -> list[OurUsage]:
    return [OurUsage(r.account, r.day, r.model, r.token_type, r.tokens) for r in rows]


async def test_a_scaled_simulator_export_is_fetched_parsed_and_flagged(sim):
    server, session = sim
    base = str(server.make_url("")).rstrip("/")
    today = datetime.now(timezone.utc).date()
    for _ in range(10):
        await _chat(session, base, "sk-acme-1")
    await _chat(session, base, "sk-globex-2")
    true_rows = []
    for account in ("acme", "globex"):
        true_rows += parse_simulator_export(await fetch_simulator_export(session, base, account, today))
    async with session.post(f"{base}/_sim/accounts/acme", json={"export_factor": "0.97"}) as resp:
        assert resp.status == 200
    drifted = []
    for account in ("acme", "globex"):
        drifted += parse_simulator_export(await fetch_simulator_export(session, base, account, today))
    report = compare_tokens(drifted, _ours(true_rows))
    flagged = {(r.account, r.token_type): r for r in report if r.flagged}
    # acme: input 50 -> 49 (48.5 half up), cached 30 -> 29, output 320 -> 310; globex untouched
    assert set(flagged) == {("acme", "input"), ("acme", "cached_input"), ("acme", "output")}
    assert (flagged[("acme", "output")].provider_figure, flagged[("acme", "output")].ours) == (310, 320)
    # nothing in our data explains a wrong invoice: the direction is the cause named
    assert all([c.code for c in r.causes] == ["provider_reports_less"] for r in flagged.values())
    csv_rows = parse_simulator_csv(await fetch_simulator_export(session, base, "acme", today, csv=True))
    assert {r.tokens for r in csv_rows if r.token_type == "output"} == {310}


async def test_an_extra_token_type_is_flagged_as_unpriced(sim):
    server, session = sim
    base = str(server.make_url("")).rstrip("/")
    today = datetime.now(timezone.utc).date()
    await _chat(session, base, "sk-acme-1")
    ours = _ours(parse_simulator_export(await fetch_simulator_export(session, base, "acme", today)))
    async with session.post(f"{base}/_sim/accounts/acme", json={"extra_token_type": "input_audio"}) as resp:
        assert resp.status == 200
    report = compare_tokens(parse_simulator_export(await fetch_simulator_export(session, base, "acme", today)), ours)
    (row,) = [r for r in report if r.flagged]
    assert (row.token_type, row.provider_figure, row.ours) == ("input_audio", 10, 0)
    assert [c.code for c in row.causes] == ["unpriced_token_type"]


async def test_a_simulator_error_is_a_fetch_error(sim):
    server, session = sim
    base = str(server.make_url("")).rstrip("/")
    with pytest.raises(ExportFetchError, match=r"/v1/usage/export answered 404"):
        await fetch_simulator_export(session, base + "/nowhere", "acme", date(2026, 11, 30))


# --- real admin APIs: a stand-in that serves the fixture pages by cursor and checks the key -------------------


def _admin_app(seen: list) -> web.Application:
    pages = {None: "openai_usage_page1.json", "page_AAAAAGdGxdEiJdKOAAAAAGcqsYA=": "openai_usage_page2.json"}
    an_pages = {None: "anthropic_usage_page1.json", "page_MjAyNS0wNS0xNFQwMDowMDowMFo=": "anthropic_usage_page2.json"}

    async def openai_usage(request: web.Request) -> web.Response:
        seen.append(dict(request.query))
        if request.headers.get("Authorization") != f"Bearer {ADMIN_KEY}":
            return web.json_response({"error": {"message": f"bad key {request.headers.get('Authorization')}"}},
                                     status=401)
        return web.Response(body=(FIXTURES / pages[request.query.get("page")]).read_bytes(),
                            content_type="application/json")

    async def anthropic_usage(request: web.Request) -> web.Response:
        seen.append(list(request.query.items()))
        assert request.headers["x-api-key"] == ADMIN_KEY and request.headers["anthropic-version"] == "2023-06-01"
        return web.Response(body=(FIXTURES / an_pages[request.query.get("page")]).read_bytes(),
                            content_type="application/json")

    async def endless(request: web.Request) -> web.Response:
        return web.json_response({"object": "page", "data": [], "has_more": True, "next_page": None})

    app = web.Application()
    app.router.add_get("/v1/organization/usage/completions", openai_usage)
    app.router.add_get("/v1/organization/costs", endless)
    app.router.add_get("/v1/organizations/usage_report/messages", anthropic_usage)
    return app


@pytest.fixture
async def admin():
    seen: list = []
    server = TestServer(_admin_app(seen))
    await server.start_server()
    async with aiohttp.ClientSession() as session:
        yield str(server.make_url("")).rstrip("/"), session, seen
    await server.close()


async def test_openai_pages_are_followed_to_the_end(admin):
    base, session, seen = admin
    bodies = await fetch_openai_usage(session, ADMIN_KEY, date(2026, 11, 30), base_url=base)
    assert len(bodies) == 2 and "page" not in seen[0] and seen[1]["page"] == "page_AAAAAGdGxdEiJdKOAAAAAGcqsYA="
    assert (seen[0]["start_time"], seen[0]["end_time"], seen[0]["bucket_width"]) == ("1795996800", "1796083200", "1d")
    assert {r.tokens for r in parse_openai_usage(bodies, "oa") if r.token_type == "cached_input"} == {800, 500, 10}


async def test_anthropic_pages_and_params(admin):
    base, session, seen = admin
    bodies = await fetch_anthropic_usage(session, ADMIN_KEY, date(2026, 11, 30), base_url=base)
    assert len(bodies) == 2
    assert ("starting_at", "2026-11-30T00:00:00+00:00") in seen[0] and ("group_by[]", "model") in seen[0]
    assert sum(r.tokens for r in parse_anthropic_usage(bodies, "an") if r.token_type == "cache_write") == 1050


async def test_a_refused_key_never_appears_in_the_error(admin):
    base, session, _ = admin
    with pytest.raises(ExportFetchError) as err:
        await fetch_openai_usage(session, "sk-wrong-key-secret", date(2026, 11, 30), base_url=base)
    assert err.value.status == 401 and "sk-wrong-key-secret" not in str(err.value) and "<redacted>" in str(err.value)


async def test_a_cursor_that_is_missing_stops_with_an_error(admin):
    base, session, _ = admin
    with pytest.raises(ExportFetchError, match="has_more is true but next_page is None"):
        await fetch_openai_costs(session, ADMIN_KEY, date(2026, 11, 30), base_url=base)


async def test_an_account_without_credentials_is_a_clear_error_before_any_request(admin):
    base, session, seen = admin
    with pytest.raises(ExportFetchError, match="no admin API key for this account"):
        await fetch_anthropic_usage(session, "", date(2026, 11, 30), base_url=base)
    assert seen == []
