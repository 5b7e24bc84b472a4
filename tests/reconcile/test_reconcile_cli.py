"""``farebox reconcile`` in-process against an OpenAI admin-API stand-in: tokens and money, files, events, bad input.

The config is the example's with its OpenAI-dialect deployment moved to a
real-provider account (``acct-openai``, source ``openai``, admin key named
``OPENAI_ADMIN_KEY``); the stand-in serves documented usage and cost pages
and refuses any other key. Our side is written to the SQLite event log as the
gateway would; the command archives it itself (embedded mode).
"""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import date, datetime, time, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from farebox.cli import main
from farebox.settings import load_settings
from ledger.events import RequestAttempted
from ledger.reconcile_events import ReconcileReported
from ledger.usage import TokenUsage
from streams.sqlite_log import SqliteEventLog
from tests.harness import read_events

ROOT = Path(__file__).resolve().parents[2]
DAY = date(2026, 11, 20)
MODEL = "gpt-4o-mini-2024-07-18"
ADMIN_KEY = "sk-admin-never-print-me"
START = int(datetime.combine(DAY, time.min, timezone.utc).timestamp())


def usage_page(input_tokens: int = 1500, cached: int = 500, output: int = 300) -> dict:
    result = {"object": "organization.usage.completions.result", "input_tokens": input_tokens,
              "input_cached_tokens": cached, "output_tokens": output, "input_audio_tokens": 0,
              "output_audio_tokens": 0, "num_model_requests": 3, "project_id": "proj_a", "user_id": None,
              "api_key_id": "key_a", "model": MODEL, "batch": False}
    return {"object": "page", "has_more": False, "next_page": None,
            "data": [{"object": "bucket", "start_time": START, "end_time": START + 86400, "results": [result]}]}


EMBED_MODEL = "text-embedding-3-small"


def kind_page(kind: str, results: list[dict] | None = None) -> dict:
    """One day's page of another usage endpoint (no traffic unless ``results``)."""
    return {"object": "page", "has_more": False, "next_page": None,
            "data": [{"object": "bucket", "start_time": START, "end_time": START + 86400, "results": [
                {"object": f"organization.usage.{kind}.result", **r} for r in results or ()]}]}


def cost_page(output: str = "0.003") -> dict:
    items = {"input": "0.002", "cached input": "0.0001", "output": output}
    results = [{"object": "organization.costs.result", "amount": {"value": v, "currency": "usd"},
                "line_item": f"{MODEL}, {kind}", "project_id": "proj_a"} for kind, v in items.items()]
    return {"object": "page", "has_more": False, "next_page": None,
            "data": [{"object": "bucket", "start_time": START, "end_time": START + 86400, "results": results}]}


class AdminApi:
    """Serves ``pages[path]`` (bytes) to requests bearing the admin key; 401 otherwise."""

    def __init__(self) -> None:
        self.pages: dict[str, bytes] = {"/v1/organization/usage/completions": json.dumps(usage_page()).encode(),
                                        "/v1/organization/costs": json.dumps(cost_page()).encode()}
        for kind in ("embeddings", "moderations", "images", "audio_speeches", "audio_transcriptions"):
            self.pages[f"/v1/organization/usage/{kind}"] = json.dumps(kind_page(kind)).encode()
        self.hits = 0
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                api.hits += 1
                body = api.pages.get(self.path.split("?")[0])
                ok = self.headers.get("Authorization") == f"Bearer {ADMIN_KEY}" and body is not None
                self.send_response(200 if ok else 401)
                self.end_headers()
                self.wfile.write(body if ok else b'{"error": "bad key"}')

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def admin() -> Iterator[AdminApi]:
    api = AdminApi()
    thread = threading.Thread(target=api.server.serve_forever, daemon=True)
    thread.start()
    yield api
    api.server.shutdown()
    api.server.server_close()


@pytest.fixture
def config(tmp_path: Path, admin: AdminApi, monkeypatch: pytest.MonkeyPatch) -> Path:
    tree = yaml.safe_load((ROOT / "examples" / "farebox.yaml").read_text())
    tree["secrets_file"] = str(ROOT / "examples" / "secrets.env")
    tree["state_dir"] = str(tmp_path / "state")
    tree["event_log"]["path"] = str(tmp_path / "state" / "events.sqlite")
    dep = tree["deployments"][0]
    dep.update(provider="openai", account="acct-openai", model=MODEL)
    embed = next(d for d in tree["deployments"] if d["id"] == "sim-embed-mumbai")
    embed.update(provider="openai", account="acct-openai", model=EMBED_MODEL)
    tree["reconcile"] = {"drift_threshold_pct": "1", "accounts": {
        "acct-openai": {"source": "openai", "admin_key_env": "OPENAI_ADMIN_KEY", "base_url": admin.url}}}
    path = tmp_path / "farebox.yaml"
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    monkeypatch.setenv("OPENAI_ADMIN_KEY", ADMIN_KEY)
    return path


def record_usage(config: Path, *usages: TokenUsage, embeddings: bool = False) -> None:
    """Attempts on the OpenAI-dialect deployment (or the embeddings one) at 10:00 UTC of DAY, as the gateway
    appends them."""
    settings = load_settings(config)
    deployment, model, prefix = ("sim-embed-mumbai", EMBED_MODEL, "e") if embeddings else (
        "sim-openai-mumbai", MODEL, "r")

    async def write() -> None:
        log = SqliteEventLog.open(settings.event_log_path)
        for i, usage in enumerate(usages):
            await log.append(RequestAttempted(
                time=datetime.combine(DAY, time(10, i), timezone.utc), request_id=f"{prefix}{i}", team="platform",
                attempt=1, deployment=deployment, provider="openai", account="acct-openai", model=model,
                region="ap-south-1", outcome="ok", status=200, ttft_ms=100, latency_ms=500, usage=usage,
                cost_micro=1, currency="INR", price_version=1, error_code=None))
        await log.close()

    settings.event_log_path.parent.mkdir(parents=True, exist_ok=True)
    asyncio.run(write())


def run(config: Path, *args: str) -> int:
    return main(["reconcile", "--config", str(config), "--date", DAY.isoformat(), "--account", "acct-openai",
                 *args])


def test_tokens_and_money_agree_exit_0(config, capsys):
    record_usage(config, TokenUsage(input=600, cached_input=300, output=200),
                 TokenUsage(input=400, cached_input=200, output=60, reasoning=40))
    assert run(config, "--format", "json") == 0
    report = json.loads(capsys.readouterr().out)
    figures = {(r["measure"], r["token_type"]): (r["provider_figure"], r["ours"]) for r in report["rows"]}
    # OpenAI's input_tokens 1500 include the 500 cached; our reasoning is inside their output
    assert figures[("tokens", "input")] == ("1000", "1000")
    assert figures[("tokens", "cached_input")] == ("500", "500")
    assert figures[("tokens", "output")] == ("300", "300")
    # money in USD at the deployment's prices (1000 x $2, 500 x $0.20, 300 x $10 per 1M), ours in micro-units
    assert figures[("money", "input")] == ("0.002", "0.002000")
    assert figures[("money", "cached_input")] == ("0.0001", "0.000100")
    assert figures[("money", "output")] == ("0.003", "0.003000")
    assert report["flagged"] == 0
    written = json.loads((config.parent / "state" / "reconcile" / f"{DAY}.acct-openai.json").read_text())
    assert written == report
    (event,) = [e for e in read_events(load_settings(config).event_log_path) if isinstance(e, ReconcileReported)]
    assert (event.id, event.rows, event.flagged) == (report["event_id"], 6, 0)


def test_a_day_with_embeddings_reconciles_from_the_embeddings_usage_report(config, admin, capsys):
    """OpenAI reports embeddings at their own endpoint: read, the day's embedding tokens match ours (no flag,
    exit 0); traffic the gateway never saw (another endpoint's model) is flagged with a cause."""
    record_usage(config, TokenUsage(input=1000, cached_input=500, output=300))
    record_usage(config, TokenUsage(input=700), TokenUsage(input=300), embeddings=True)
    admin.pages["/v1/organization/usage/embeddings"] = json.dumps(kind_page("embeddings", [
        {"input_tokens": 1000, "num_model_requests": 2, "model": EMBED_MODEL, "project_id": "proj_a"}])).encode()
    assert run(config, "--format", "json") == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    embed = [r for r in rows if r["measure"] == "tokens" and r["model"] == EMBED_MODEL]
    assert [(r["token_type"], r["provider_figure"], r["ours"], r["flagged"]) for r in embed] == [
        ("input", "1000", "1000", False)]
    admin.pages["/v1/organization/usage/images"] = json.dumps(kind_page("images", [
        {"images": 4, "num_model_requests": 2, "model": "gpt-image-1", "size": "1024x1024", "source": "image.generation",
         "project_id": "proj_b"}])).encode()
    assert run(config, "--format", "json") == 1
    rows = json.loads(capsys.readouterr().out)["rows"]
    (image,) = [r for r in rows if r["flagged"]]
    assert (image["model"], image["token_type"], image["provider_figure"]) == ("gpt-image-1", "images", "4")
    assert [c["code"] for c in image["causes"]] == ["unpriced_token_type"]


def test_a_money_drift_is_flagged_exit_1_and_a_rerun_is_a_new_version(config, admin, capsys, tmp_path):
    record_usage(config, TokenUsage(input=1000, cached_input=500, output=300))
    out = tmp_path / "first.json"
    assert run(config, "--out", str(out)) == 0
    first = json.loads(out.read_text())
    admin.pages["/v1/organization/costs"] = json.dumps(cost_page(output="0.02")).encode()
    capsys.readouterr()
    assert run(config, "--format", "csv") == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("measure,provider,account,day,model,token_type,tier,provider_figure,ours")
    (flagged,) = [line for line in lines if ",yes," in line]
    assert flagged == "money,openai,acct-openai,2026-11-20,gpt-4o-mini-2024-07-18,output,,0.02,0.003000,0.017000," \
                      "85.00,yes,provider_reports_more: the provider reports 0.017000 USD more than we recorded " \
                      "(0.02 against 0.003000),USD"  # nothing in our data explains it: the direction is the cause
    ids = [e.id for e in read_events(load_settings(config).event_log_path) if isinstance(e, ReconcileReported)]
    assert len(ids) == 2 and ids[0] == first["event_id"] and len(set(ids)) == 2


def _gauges(config: Path) -> dict[tuple[str, str | None], float]:
    """(name, measure) -> value of the account's textfile; every sample is labelled with the account."""
    from prometheus_client.parser import text_string_to_metric_families

    text = (config.parent / "state" / "reconcile" / "metrics" / "farebox_reconcile.acct-openai.prom").read_text()
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    assert all((s.labels["account"], s.labels["provider"]) == ("acct-openai", "openai") for s in samples)
    return {(s.name, s.labels.get("measure")): s.value for s in samples}


def test_each_run_leaves_the_accounts_drift_for_prometheus(config, admin, capsys):
    record_usage(config, TokenUsage(input=1000, cached_input=500, output=300))
    assert run(config) == 0
    clean = _gauges(config)
    assert clean[("farebox_reconcile_drift_ratio", "money")] == 0
    assert clean[("farebox_reconcile_drift_ratio", "tokens")] == 0
    assert clean[("farebox_reconcile_flagged_rows", None)] == 0
    assert clean[("farebox_reconcile_day_seconds", None)] == START
    assert clean[("farebox_reconcile_last_run_timestamp_seconds", None)] > START
    admin.pages["/v1/organization/costs"] = json.dumps(cost_page(output="0.02")).encode()
    assert run(config) == 1  # the file is replaced by the latest run's figures
    drifted = _gauges(config)
    assert drifted[("farebox_reconcile_drift_ratio", "money")] == pytest.approx(0.85, abs=1e-4)
    assert drifted[("farebox_reconcile_drift_ratio", "tokens")] == 0
    assert drifted[("farebox_reconcile_flagged_rows", None)] == 1


def test_table_names_the_causes(config, admin, capsys):
    record_usage(config, TokenUsage(input=1000, cached_input=500, output=300, source="estimated"))
    admin.pages["/v1/organization/usage/completions"] = json.dumps(usage_page(output=330)).encode()
    assert run(config) == 1
    out = capsys.readouterr().out
    assert "1 flagged beyond 1%" in out
    assert "cause estimated_usage: 100.00% of our 300 tokens (300) were estimated" in out


def test_an_export_that_does_not_parse_names_the_field_exit_2(config, admin, capsys):
    record_usage(config, TokenUsage(input=1000, output=300))
    page = usage_page()
    page["data"][0]["results"][0]["output_tokens"] = "many"
    admin.pages["/v1/organization/usage/completions"] = json.dumps(page).encode()
    assert run(config) == 2
    err = capsys.readouterr().err
    assert "account acct-openai: the openai completions usage report does not parse at data[0].results[0].output_tokens" in err
    assert not (config.parent / "state" / "reconcile").exists()


def test_an_account_with_no_credentials_exit_2_and_no_request(config, admin, capsys, monkeypatch):
    record_usage(config, TokenUsage(input=1000, output=300))
    monkeypatch.delenv("OPENAI_ADMIN_KEY")
    assert run(config) == 2
    err = capsys.readouterr().err
    assert "account acct-openai: no credentials: the admin key OPENAI_ADMIN_KEY is not set" in err
    assert admin.hits == 0


def test_a_refused_key_is_exit_3_and_never_printed(config, capsys, monkeypatch):
    record_usage(config, TokenUsage(input=1000, output=300))
    monkeypatch.setenv("OPENAI_ADMIN_KEY", "sk-wrong-key-also-secret")
    assert run(config) == 3
    captured = capsys.readouterr()
    assert "answered 401" in captured.err and "sk-wrong" not in captured.err + captured.out


def test_a_day_with_no_archive_exit_2_before_any_request(config, admin, capsys):
    record_usage(config, TokenUsage(input=1000, output=300))
    assert main(["reconcile", "--config", str(config), "--date", "2026-11-21", "--account", "acct-openai"]) == 2
    assert "no archive for 2026-11-21" in capsys.readouterr().err
    assert admin.hits == 0


def test_no_event_log_exit_2(config, capsys):
    assert run(config) == 2
    assert "no event log at" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "message"), [
    (["--date", "2026-11-31"], "--date must be a day YYYY-MM-DD"),
    (["--date", DAY.isoformat(), "--account", "acct-nobody"], "account 'acct-nobody' is in no deployment"),
])
def test_bad_date_or_unknown_account_exit_2(config, capsys, args, message):
    assert main(["reconcile", "--config", str(config), *args]) == 2
    assert message in capsys.readouterr().err


def test_an_account_with_no_export_source_exit_2(config, capsys):
    tree = yaml.safe_load(config.read_text())
    del tree["reconcile"]["accounts"]
    config.write_text(yaml.safe_dump(tree))
    assert run(config) == 2
    assert "account acct-openai: no usage export source; add reconcile.accounts.acct-openai" in \
        capsys.readouterr().err


def test_reconcile_settings_are_validated_together(config, capsys):
    tree = yaml.safe_load(config.read_text())
    tree["reconcile"] = {"drift_threshold_pct": "0", "typo": 1,
                         "accounts": {"a": {"source": "openai"}, "b": {"source": "oracle", "admin_key_env": "K"},
                                      "c": {"source": "azure"}, "d": {"source": "aws", "models": ["x"]}}}
    config.write_text(yaml.safe_dump(tree))
    assert main(["config", "check", str(config)]) == 2
    err = capsys.readouterr().err
    for problem in ("reconcile.drift_threshold_pct: must be > 0", "reconcile.typo: unknown field",
                    "reconcile.accounts.a.admin_key_env: is required for a openai export",
                    "reconcile.accounts.b.source: must be one of",
                    "reconcile.accounts.c.path: is required for a azure export",
                    "reconcile.accounts.d.path: an aws export needs path (Bedrock invocation logs), cur_path",
                    "reconcile.accounts.d.models: expected a mapping"):
        assert problem in err
