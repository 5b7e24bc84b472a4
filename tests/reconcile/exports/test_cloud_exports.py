"""``farebox reconcile`` against the cloud providers' own exports, read from local copies: AWS (Bedrock
invocation logs and CUR 2.0), Google Cloud (the Billing export's rows) and Azure (a Cost Management export).

For each: the export's shape as documented (``cloud_fixtures``), the parser's reading of it (model names mapped,
units multiplied, credits netted, tax and other services skipped), then the command in-process over the
example's deployment of that cloud: a clean day reconciles with no flagged row (exit 0); a 3% under-report of
one token type is flagged, tokens and money, with the cause ``provider_reports_less`` (exit 1).
"""

from __future__ import annotations

import asyncio
import json
from datetime import date, datetime, time, timezone
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from farebox.cli import main
from farebox.settings import load_settings
from ledger.events import RequestAttempted
from ledger.usage import TokenUsage
from reconcile.errors import SourceUnavailable
from reconcile.exports.aws import cur_files, parse_cur
from reconcile.exports.rows import ExportParseError
from reconcile.file_exports import read_file_export
from reconcile.invoices import invoice_ids, invoices_path, read_invoices, record_invoices
from streams.sqlite_log import SqliteEventLog
from tests.reconcile.exports.cloud_fixtures import write_aws, write_azure, write_google

ROOT = Path(__file__).resolve().parents[3]
INVOICES = {"acct-retail-aws": "EUINUS26-1234567", "acct-retail-azure": "G012345678"}  # Google names none
DAY = date(2026, 11, 20)
CLOUDS = {  # account: (deployment, our model, billing name, tokens, prices)
    "acct-retail-aws": ("sim-bedrock-mumbai", "sim.nova-mid-v1:0", "NovaMid",
                        {"input": 1_200_000, "cached_input": 400_000, "cache_write": 100_000, "output": 3_000_000},
                        {"input": "0.80", "cached_input": "0.20", "cache_write": "1.00", "output": "3.20"}),
    "acct-retail-gemini": ("sim-gemini-mumbai", "sim-gemini-flash-2026-09", "Gemini Flash 2026-09",
                           {"input": 1_000_000, "cached_input": 200_000, "output": 2_000_000},
                           {"input": "0.30", "cached_input": "0.03", "output": "2.50"}),
    "acct-retail-azure": ("sim-azure-mumbai", "sim-azure-gpt-mid", "sim-azure-gpt-mid",
                          {"input": 1_000_000, "cached_input": 200_000, "output": 500_000},
                          {"input": "2.50", "cached_input": "1.25", "output": "10.00"}),
}


def write_export(account: str, root: Path, tokens: dict[str, int]) -> dict:
    """The account's export of DAY under ``root``; its reconcile.accounts entry."""
    _, model, billing, _, prices = CLOUDS[account]
    if account == "acct-retail-aws":
        logs, cur = write_aws(root, DAY, model, billing, tokens, prices)
        return {"source": "aws", "path": str(logs), "cur_path": str(cur), "models": {billing: model}}
    if account == "acct-retail-gemini":
        return {"source": "google", "path": str(write_google(root, DAY, billing, tokens, prices,
                                                             credit=Decimal("0.40"))), "models": {billing: model}}
    return {"source": "azure", "path": str(write_azure(root, DAY, billing, tokens, prices))}


def config_for(tmp_path: Path, account: str, entry: dict) -> Path:
    tree = yaml.safe_load((ROOT / "examples" / "farebox.yaml").read_text())
    tree["secrets_file"] = str(ROOT / "examples" / "secrets.env")
    tree["state_dir"] = str(tmp_path / "state")
    tree["event_log"]["path"] = str(tmp_path / "state" / "events.sqlite")
    tree["reconcile"] = {"drift_threshold_pct": "1", "accounts": {account: entry}}
    path = tmp_path / "farebox.yaml"
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return path


def record(config: Path, account: str) -> None:
    """The day's traffic on the account's deployment as the gateway records it: the tokens in two attempts."""
    settings = load_settings(config)
    dep = settings.snapshot.deployments[CLOUDS[account][0]]
    tokens = CLOUDS[account][3]
    halves = [{k: v // 2 for k, v in tokens.items()}, {k: v - v // 2 for k, v in tokens.items()}]

    async def write() -> None:
        log = SqliteEventLog.open(settings.event_log_path)
        for i, half in enumerate(halves):
            await log.append(RequestAttempted(
                time=datetime.combine(DAY, time(10, i), timezone.utc), request_id=f"c{i}", team="platform",
                attempt=1, deployment=dep.id, provider=dep.provider, account=dep.account, model=dep.model,
                region=dep.region, outcome="ok", status=200, ttft_ms=100, latency_ms=500, usage=TokenUsage(**half),
                cost_micro=1, currency="INR", price_version=1, error_code=None))
        await log.close()

    settings.event_log_path.parent.mkdir(parents=True, exist_ok=True)
    asyncio.run(write())


def reconcile(config: Path, account: str, capsys) -> tuple[int, list[dict]]:
    capsys.readouterr()
    code = main(["reconcile", "--config", str(config), "--date", DAY.isoformat(), "--account", account,
                 "--format", "json"])
    out = capsys.readouterr().out
    return code, (json.loads(out)["rows"] if out.strip() else [])


@pytest.mark.parametrize("account", sorted(CLOUDS))
def test_a_clean_day_reconciles_and_a_three_percent_under_report_is_flagged(account, tmp_path, capsys):
    tokens = CLOUDS[account][3]
    config = config_for(tmp_path, account, write_export(account, tmp_path / "clean", tokens))
    record(config, account)
    code, rows = reconcile(config, account, capsys)
    assert code == 0, rows
    assert not [r for r in rows if r["flagged"]]
    measured = {(r["measure"], r["token_type"]) for r in rows if r["model"] == CLOUDS[account][1]}
    assert {("tokens", kind) for kind in tokens} <= measured and {("money", kind) for kind in tokens} <= measured
    invoices = read_invoices(invoices_path(load_settings(config).state_dir))  # for the FOCUS export's InvoiceId
    assert invoices == ({account: {"2026-11": [INVOICES[account]]}} if account in INVOICES else {})

    under = dict(tokens, output=tokens["output"] * 97 // 100)  # the provider under-reports output by 3%
    config = config_for(tmp_path, account, write_export(account, tmp_path / "under", under))
    code, rows = reconcile(config, account, capsys)
    assert code == 1
    flagged = {(r["measure"], r["token_type"]): r for r in rows if r["flagged"]}
    assert set(flagged) == {("tokens", "output"), ("money", "output")}, flagged
    for row in flagged.values():
        assert Decimal(row["percent"]) == Decimal("-3.09")  # (97 - 100) / 97
        assert [c["code"] for c in row["causes"]] == ["provider_reports_less"]


@pytest.mark.parametrize("account", sorted(CLOUDS))
def test_the_same_tokens_billed_at_another_rate_is_a_price_mismatch(account, tmp_path, capsys):
    """Every cloud export gives the tokens each charge bills: money off on agreeing tokens is the rate."""
    _, _, _, tokens, prices = CLOUDS[account]
    CLOUDS[account] = (*CLOUDS[account][:4], dict(prices, output=str(Decimal(prices["output"]) * Decimal("1.05"))))
    try:
        config = config_for(tmp_path, account, write_export(account, tmp_path / "dearer", tokens))
    finally:
        CLOUDS[account] = (*CLOUDS[account][:4], prices)
    record(config, account)
    code, rows = reconcile(config, account, capsys)
    assert code == 1
    flagged = [r for r in rows if r["flagged"]]
    assert [(r["measure"], r["token_type"]) for r in flagged] == [("money", "output")], flagged
    (cause,) = flagged[0]["causes"]
    assert cause["code"] == "price_mismatch", cause
    assert f"({tokens['output']} billed against our {tokens['output']})" in cause["detail"]


def test_the_parsers_skip_what_is_not_model_usage_and_net_credits(tmp_path):
    _, model, billing, tokens, prices = CLOUDS["acct-retail-gemini"]
    folder = write_google(tmp_path, DAY, billing, tokens, prices, credit=Decimal("0.40"), search=True)
    usage, costs = read_file_export("google", "g", DAY, str(folder), None, {billing: model}, [])
    assert {(r.model, r.token_type, r.tokens) for r in usage} == {(model, k, v) for k, v in tokens.items()}
    money = {(c.model, c.token_type): c.amount for c in costs}
    assert money[(model, "output")] == Decimal("5.00")  # cost 5.40 less a 0.40 committed-use credit
    assert money[(None, "Vertex AI Search Enterprise query")] == Decimal("0.04")  # billed, no token count
    assert len(money) == len(tokens) + 1  # no tax, no Compute Engine, nothing of the next day
    _, model, billing, tokens, prices = CLOUDS["acct-retail-aws"]
    logs, cur = write_aws(tmp_path / "aws", DAY, model, billing, tokens, prices)
    usage, costs = read_file_export("aws", "a", DAY, None, str(cur), {billing: model}, [])
    assert {(r.token_type, r.tokens) for r in usage} == set(tokens.items())  # CUR's 1K-token units, multiplied
    assert {c.description for c in costs} == {"invoice EUINUS26-1234567"} and sum(c.amount for c in costs) == \
        Decimal("10.74")  # no tax line, no S3
    usage, _ = read_file_export("aws", "a", DAY, str(logs), str(cur), {billing: model}, [])
    assert {r.requests for r in usage} == {4}  # the logs count requests; tomorrow's record is not today's


def test_cur_in_parquet_reads_as_the_csv_does(tmp_path):
    """The Data Exports' Parquet CUR (doubles, a UTC timestamp) gives the very rows the CSV gives, to the cent."""
    _, model, billing, tokens, prices = CLOUDS["acct-retail-aws"]
    models = lambda name: model if name == billing else name  # noqa: E731
    _, csv_root = write_aws(tmp_path / "csv", DAY, model, billing, tokens, prices)
    _, parquet_root = write_aws(tmp_path / "parquet", DAY, model, billing, tokens, prices, parquet=True)
    (parquet_file,) = cur_files(parquet_root, DAY)
    assert parquet_file.suffix == ".parquet"
    from_csv = parse_cur(cur_files(csv_root, DAY), "acct-retail-aws", DAY, models)
    from_parquet = parse_cur([parquet_file], "acct-retail-aws", DAY, models)
    assert from_parquet == from_csv and from_csv[0] and from_csv[1]
    assert {c.token_type: c.amount for c in from_parquet[1]}["output"] == Decimal("9.6")
    parquet_file.write_bytes(b"PAR1 not really")
    with pytest.raises(ExportParseError, match="not a readable Parquet file"):
        parse_cur([parquet_file], "acct-retail-aws", DAY, models)


def test_a_missing_or_malformed_export_is_a_clear_error(tmp_path):
    with pytest.raises(SourceUnavailable, match="no Azure cost export files for 2026-11-20 under"):
        read_file_export("azure", "z", DAY, str(tmp_path / "nowhere"), None, {}, [])
    bad = tmp_path / "bad" / "export.csv"
    bad.parent.mkdir()
    bad.write_text("Date,MeterName\n11/20/2026,x\n")
    with pytest.raises(ExportParseError, match="not an Azure cost export: no column MeterCategory"):
        read_file_export("azure", "z", DAY, str(bad.parent), None, {}, [])
    line = tmp_path / "gcp" / "rows.json"
    line.parent.mkdir()
    line.write_text('{"service": {"description": "Vertex AI"}, "sku": {"description": "Gemini Input token count"}, '
                    '"usage_start_time": "2026-11-20 10:00:00 UTC", "usage": {"amount": -3, "unit": "count"}, '
                    '"cost": 1, "currency": "USD"}\n')
    with pytest.raises(ExportParseError, match=r"rows.json line 1.usage.amount: must be a non-negative number"):
        read_file_export("google", "g", DAY, str(line.parent), None, {}, [])


def test_invoices_are_merged_and_only_a_single_one_is_given_to_focus(tmp_path):
    from reconcile.exports.rows import CostRow

    path = tmp_path / "invoices.json"
    row = lambda account, day, invoice: CostRow("aws", account, day, "m", "input", Decimal(1), "USD",  # noqa: E731
                                                None, invoice)
    record_invoices(path, [row("a", DAY, "I-1"), row("a", DAY, "I-1"), row("b", DAY, None)])
    record_invoices(path, [row("a", date(2026, 12, 1), "I-2"), row("c", DAY, "J-1"), row("c", DAY, "J-2")])
    assert read_invoices(path) == {"a": {"2026-11": ["I-1"], "2026-12": ["I-2"]}, "c": {"2026-11": ["J-1", "J-2"]}}
    assert invoice_ids(read_invoices(path)) == {("a", "2026-11"): "I-1", ("a", "2026-12"): "I-2"}  # c: two
