"""``farebox reconcile`` against the OpenAI and Anthropic admin APIs (a local stand-in serving their documented
pages), end to end in-process: a clean day reconciles with no flagged row; a 3% under-report of one token type is
flagged, tokens and money, with the cause ``provider_reports_less``.

OpenAI: the usage endpoints (completions, where input includes the cached input; the others empty) and the
costs report (``"<model>, <kind>"`` line items). Anthropic: the messages usage report and the cost report, whose
amounts are decimal strings in cents (fractional cents included). Keys travel only in the headers each API
documents; the stand-in refuses anything else.
"""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import datetime, time, timedelta, timezone
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from farebox.settings import load_settings
from ledger.events import RequestAttempted
from ledger.usage import TokenUsage
from streams.sqlite_log import SqliteEventLog
from tests.reconcile.exports.test_cloud_exports import DAY, config_for, reconcile

KEY = "sk-admin-reconcile-0001"
START = int(datetime.combine(DAY, time.min, timezone.utc).timestamp())
ACCOUNTS = {  # account: (source, deployment, model, prices per 1M USD)
    "acct-retail": ("openai", "sim-openai-mumbai", "sim-gpt-mid-2026-08",
                    {"input": "2.00", "cached_input": "0.20", "output": "10.00"}),
    "acct-retail-anthropic": ("anthropic", "sim-anthropic-mumbai", "sim-claude-mid-2026-08",
                              {"input": "3.00", "cached_input": "0.30", "cache_write": "3.75", "output": "15.00"}),
}
TOKENS = {"acct-retail": {"input": 800_000, "cached_input": 200_000, "output": 1_500_000},
          "acct-retail-anthropic": {"input": 800_000, "cached_input": 200_000, "cache_write": 100_000,
                                    "output": 1_500_000}}


def usd(tokens: int, per_million: str) -> Decimal:
    return Decimal(tokens) * Decimal(per_million) / 1_000_000


def openai_pages(model: str, tokens: dict[str, int], prices: dict[str, str]) -> dict[str, bytes]:
    """The usage endpoints and the costs report (with each line item's billed ``quantity``) of one day."""
    def page(results: list) -> bytes:
        return json.dumps({"object": "page", "has_more": False, "next_page": None, "data": [
            {"object": "bucket", "start_time": START, "end_time": START + 86400, "results": results}]}).encode()

    out = {f"/v1/organization/usage/{kind}": page([]) for kind in ("embeddings", "moderations", "images",
                                                                   "audio_speeches", "audio_transcriptions")}
    out["/v1/organization/usage/completions"] = page([{
        "object": "organization.usage.completions.result", "input_tokens": tokens["input"] + tokens["cached_input"],
        "input_cached_tokens": tokens["cached_input"], "output_tokens": tokens["output"], "input_audio_tokens": 0,
        "output_audio_tokens": 0, "num_model_requests": 2, "project_id": "proj_a", "user_id": None,
        "api_key_id": None, "model": model, "batch": False}])
    out["/v1/organization/costs"] = page([
        {"object": "organization.costs.result", "amount": {"value": float(usd(tokens[k], prices[k])), "currency": "usd"},
         "line_item": f"{model}, {label}", "project_id": "proj_a", "quantity": tokens[k]}
        for k, label in (("input", "input"), ("cached_input", "cached input"), ("output", "output"))])
    return out


def anthropic_pages(model: str, tokens: dict[str, int], prices: dict[str, str]) -> dict[str, bytes]:
    start = datetime.combine(DAY, time.min, timezone.utc)
    bucket = {"starting_at": start.isoformat(), "ending_at": (start + timedelta(days=1)).isoformat()}

    def page(results: list) -> bytes:
        return json.dumps({"has_more": False, "next_page": None, "data": [{**bucket, "results": results}]}).encode()

    names = {"input": "uncached_input_tokens", "cached_input": "cache_read_input_tokens",
             "cache_write": "cache_creation.ephemeral_5m_input_tokens", "output": "output_tokens"}
    return {
        "/v1/organizations/usage_report/messages": page([{
            "uncached_input_tokens": tokens["input"], "cache_read_input_tokens": tokens["cached_input"],
            "cache_creation": {"ephemeral_5m_input_tokens": tokens["cache_write"], "ephemeral_1h_input_tokens": 0},
            "output_tokens": tokens["output"], "server_tool_use": {"web_search_requests": 0}, "model": model,
            "workspace_id": None, "api_key_id": None, "service_tier": "standard", "context_window": "0-200k"}]),
        "/v1/organizations/cost_report": page([
            {"amount": str(usd(tokens[k], prices[k]) * 100), "currency": "USD", "cost_type": "tokens",
             "description": f"{model} {names[k]}", "model": model, "service_tier": "standard",
             "token_type": names[k], "workspace_id": None, "context_window": "0-200k"} for k in names]),
    }


class AdminApis:
    """Serves ``pages[path]`` to requests carrying the key the way the API documents; 401 otherwise."""

    def __init__(self) -> None:
        self.pages: dict[str, bytes] = {}
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path = self.path.split("?")[0]
                anthropic = path.startswith("/v1/organizations/")
                ok = (self.headers.get("x-api-key") == KEY and self.headers.get("anthropic-version") if anthropic
                      else self.headers.get("Authorization") == f"Bearer {KEY}")
                body = api.pages.get(path)
                self.send_response(200 if ok and body is not None else 401 if not ok else 404)
                self.end_headers()
                self.wfile.write(body if ok and body is not None else b'{"error": "no"}')

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def apis():
    api = AdminApis()
    thread = threading.Thread(target=api.server.serve_forever, daemon=True)
    thread.start()
    yield api
    api.server.shutdown()
    api.server.server_close()


def record(config: Path, account: str) -> None:
    settings = load_settings(config)
    dep = settings.snapshot.deployments[ACCOUNTS[account][1]]
    tokens = TOKENS[account]
    halves = [{k: v // 2 for k, v in tokens.items()}, {k: v - v // 2 for k, v in tokens.items()}]

    async def write() -> None:
        log = SqliteEventLog.open(settings.event_log_path)
        for i, half in enumerate(halves):
            await log.append(RequestAttempted(
                time=datetime.combine(DAY, time(9, i), timezone.utc), request_id=f"a{i}", team="platform", attempt=1,
                deployment=dep.id, provider=dep.provider, account=dep.account, model=dep.model, region=dep.region,
                outcome="ok", status=200, ttft_ms=100, latency_ms=500, usage=TokenUsage(**half), cost_micro=1,
                currency="INR", price_version=1, error_code=None))
        await log.close()

    settings.event_log_path.parent.mkdir(parents=True, exist_ok=True)
    asyncio.run(write())


@pytest.mark.parametrize("account", sorted(ACCOUNTS))
def test_a_clean_day_reconciles_and_a_three_percent_under_report_is_flagged(account, apis, tmp_path, capsys,
                                                                            monkeypatch):
    source, _, model, prices = ACCOUNTS[account]
    monkeypatch.setenv("ADMIN_KEY_FOR_TEST", KEY)
    config = config_for(tmp_path, account, {"source": source, "admin_key_env": "ADMIN_KEY_FOR_TEST",
                                            "base_url": apis.url})
    record(config, account)
    build = openai_pages if source == "openai" else anthropic_pages
    apis.pages = build(model, TOKENS[account], prices)
    code, rows = reconcile(config, account, capsys)
    assert code == 0 and rows and not [r for r in rows if r["flagged"]], rows
    assert {(r["measure"], r["token_type"]) for r in rows} >= {(m, "output") for m in ("tokens", "money")}
    under = dict(TOKENS[account], output=TOKENS[account]["output"] * 97 // 100)
    apis.pages = build(model, under, prices)
    code, rows = reconcile(config, account, capsys)
    assert code == 1
    flagged = {(r["measure"], r["token_type"]): r for r in rows if r["flagged"]}
    assert set(flagged) == {("tokens", "output"), ("money", "output")}, flagged
    for row in flagged.values():
        assert Decimal(row["percent"]) == Decimal("-3.09")
        assert [c["code"] for c in row["causes"]] == ["provider_reports_less"]


@pytest.mark.parametrize("account", sorted(ACCOUNTS))
def test_the_same_tokens_at_another_rate(account, apis, tmp_path, capsys, monkeypatch):
    """OpenAI's costs give each line item's quantity, so a dearer rate on agreeing tokens is a price mismatch;
    Anthropic's cost report gives no quantity, so the same case is named by its direction."""
    source, _, model, prices = ACCOUNTS[account]
    monkeypatch.setenv("ADMIN_KEY_FOR_TEST", KEY)
    config = config_for(tmp_path, account, {"source": source, "admin_key_env": "ADMIN_KEY_FOR_TEST",
                                            "base_url": apis.url})
    record(config, account)
    build = openai_pages if source == "openai" else anthropic_pages
    apis.pages = build(model, TOKENS[account], dict(prices, output=str(Decimal(prices["output"]) * Decimal("1.1"))))
    code, rows = reconcile(config, account, capsys)
    assert code == 1
    flagged = [r for r in rows if r["flagged"]]
    assert [(r["measure"], r["token_type"]) for r in flagged] == [("money", "output")], flagged
    (cause,) = flagged[0]["causes"]
    if source == "openai":
        assert cause["code"] == "price_mismatch"
        assert cause["detail"].endswith("charged 11 USD per 1M against our price book's 10"), cause
    else:
        assert cause["code"] == "provider_reports_more"
