"""The finance bench's reconciliation per export connector: one UTC day of the synthetic month, as each provider
would export it, reconciled as ``farebox reconcile`` does after the fetch; medians of 3.

The day's export in each connector's documented shape is built from the archive's attempted events (every
attempt, its account, model and tokens; money from the price book, exact), not by ``reconcile/sql/
our_usage.sql``, so the check is independent of the code measured: every connector must flag 0 rows.

* ``openai``: usage pages (completions per model, with cached input inside input and reasoning inside output;
  the embedding model on the embeddings endpoint) and cost pages (``"<model>, <kind>"`` line items);
* ``anthropic``: the messages usage report and the cost report (amounts in cents, fractional);
* ``aws``: Bedrock model invocation logs (one gzipped JSON line per attempt, in hour folders) and a CUR 2.0
  CSV (money per model and token type, quantities in 1K tokens);
* ``google``: Cloud Billing export rows (NDJSON, one per model and token type, reasoning as thinking tokens);
* ``azure``: a Cost Management export CSV (quantities in 1K tokens).

Timed per connector: parsing (the file connectors read their files), our side from the archive
(``reconcile.daily.our_side``, priced in the export's currency) and the report (``build_report``).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import statistics
import tempfile
import time
from collections import defaultdict
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb

from pricing.book import FxTable, PriceBook
from reconcile.daily import our_side
from reconcile.drift import DEFAULT_THRESHOLD
from reconcile.exports import parse_anthropic_costs, parse_anthropic_usage, parse_openai_costs, parse_openai_usage
from reconcile.file_exports import read_file_export
from reconcile.report import build_report
from streams.archive.read import archive_files
from tests.bench.finance.measure_reconcile import DAY

KINDS = ("input", "cached_input", "cache_write", "output", "reasoning")
_ATTEMPTS = f"""
SELECT account, model, deployment, price_version, request_id, hour(timezone('UTC', event_time)) AS hour,
       {", ".join(f"coalesce({k}_tokens, 0) AS {k}" for k in KINDS)}
FROM day_events WHERE type = 'request.attempted' AND CAST(timezone('UTC', event_time) AS DATE) = $day
QUALIFY row_number() OVER (PARTITION BY id ORDER BY log_partition, log_offset) = 1
"""


def day_attempts(root: Path, day: date) -> list[dict[str, Any]]:
    files = [str(p) for p in archive_files(root, day, day)]
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.register("day_events", con.read_parquet(files, union_by_name=True))
        cur = con.execute(_ATTEMPTS, {"day": day})
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]
    finally:
        con.close()


def totals(attempts: list[dict[str, Any]], book: PriceBook) -> tuple[dict, dict, str]:
    """(account, model, kind) -> tokens and -> exact money in the book's currency (reasoning at its own price)."""
    tokens: dict[tuple[str, str, str], int] = defaultdict(int)
    money: dict[tuple[str, str, str], Decimal] = defaultdict(Decimal)
    currency = ""
    for a in attempts:
        price = book.get(a["price_version"]).price(a["deployment"])
        currency = price.currency
        for kind in KINDS:
            if a[kind]:
                tokens[(a["account"], a["model"], kind)] += a[kind]
                money[(a["account"], a["model"], kind)] += a[kind] * price.per_million(kind) / 1_000_000
    return tokens, money, currency


def _bucket(day: date, results: list[dict]) -> bytes:
    start = int(datetime(day.year, day.month, day.day, tzinfo=timezone.utc).timestamp())
    return json.dumps({"object": "page", "has_more": False, "next_page": None, "data": [
        {"object": "bucket", "start_time": start, "end_time": start + 86400, "results": results}]}).encode()


def openai_export(tokens: dict, money: dict, currency: str, account: str, day: date, requests: dict) -> tuple:
    models = {m for (a, m, _) in tokens if a == account}
    completions, embeddings, costs = [], [], []
    for model in sorted(models):
        t = {k: tokens.get((account, model, k), 0) for k in KINDS}
        row = {"input_tokens": t["input"] + t["cached_input"], "num_model_requests": requests[(account, model)],
               "model": model, "project_id": None, "user_id": None, "api_key_id": None}
        if t["output"] or t["reasoning"] or t["cached_input"]:
            completions.append({"object": "organization.usage.completions.result", **row,
                                "input_cached_tokens": t["cached_input"], "output_tokens": t["output"] + t["reasoning"],
                                "input_audio_tokens": 0, "output_audio_tokens": 0, "batch": False})
        else:
            embeddings.append({"object": "organization.usage.embeddings.result", **row})
        for kind, label in (("input", "input"), ("cached_input", "cached input"), ("output", "output")):
            amount = money.get((account, model, kind), Decimal(0)) + (
                money.get((account, model, "reasoning"), Decimal(0)) if kind == "output" else 0)
            if amount:
                costs.append({"object": "organization.costs.result", "line_item": f"{model}, {label}",
                              "amount": {"value": str(amount), "currency": currency.lower()}, "project_id": None})
    return {"completions": _bucket(day, completions), "embeddings": _bucket(day, embeddings)}, _bucket(day, costs)


def anthropic_export(tokens: dict, money: dict, currency: str, account: str, day: date) -> tuple[bytes, bytes]:
    start = datetime(day.year, day.month, day.day, tzinfo=timezone.utc)
    usage, costs = [], []
    for model in sorted({m for (a, m, _) in tokens if a == account}):
        t = {k: tokens.get((account, model, k), 0) for k in KINDS}
        usage.append({"uncached_input_tokens": t["input"], "cache_read_input_tokens": t["cached_input"],
                      "cache_creation": {"ephemeral_5m_input_tokens": t["cache_write"], "ephemeral_1h_input_tokens": 0},
                      "output_tokens": t["output"] + t["reasoning"], "model": model})
        for kind, raw in (("input", "uncached_input_tokens"), ("cached_input", "cache_read_input_tokens"),
                          ("output", "output_tokens")):
            amount = money.get((account, model, kind), Decimal(0)) + (
                money.get((account, model, "reasoning"), Decimal(0)) if kind == "output" else 0)
            if amount:
                costs.append({"amount": str(amount * 100), "currency": currency, "cost_type": "tokens",
                              "model": model, "token_type": raw, "description": f"{model} {raw}"})
    page = {"has_more": False, "next_page": None, "data": [{"starting_at": start.isoformat(),
                                                            "ending_at": (start + timedelta(days=1)).isoformat()}]}
    return (json.dumps({**page, "data": [{**page["data"][0], "results": usage}]}).encode(),
            json.dumps({**page, "data": [{**page["data"][0], "results": costs}]}).encode())


def write_aws(folder: Path, attempts: list, tokens: dict, money: dict, currency: str, account: str, day: date) -> dict:
    by_hour: dict[int, list[str]] = defaultdict(list)
    for n, a in enumerate(attempts):
        if a["account"] == account:
            by_hour[a["hour"]].append(json.dumps({
                "schemaType": "ModelInvocationLog", "schemaVersion": "1.0",
                "timestamp": f"{day.isoformat()}T{a['hour']:02d}:00:00Z", "accountId": "123456789012",
                "region": "ap-south-1", "requestId": f"{a['request_id']}-{n}", "operation": "Converse",
                "modelId": a["model"], "input": {"inputTokenCount": a["input"],
                                                 "cacheReadInputTokenCount": a["cached_input"],
                                                 "cacheWriteInputTokenCount": a["cache_write"]},
                "output": {"outputTokenCount": a["output"] + a["reasoning"]}}))
    logs = folder / "logs" / "AWSLogs" / "123456789012" / "BedrockModelInvocationLogs" / "ap-south-1"
    for hour, lines in by_hour.items():
        target = logs / f"{day:%Y/%m/%d}" / f"{hour:02d}"
        target.mkdir(parents=True, exist_ok=True)
        (target / "part.json.gz").write_bytes(gzip.compress(("\n".join(lines) + "\n").encode(), 1))
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["line_item_usage_start_date", "line_item_product_code", "line_item_line_item_type",
                     "line_item_usage_type", "line_item_usage_amount", "pricing_unit", "line_item_unblended_cost",
                     "line_item_currency_code", "bill_invoice_id"])
    kinds = {"input": "input-tokens", "cached_input": "cache-read-input-token-count",
             "cache_write": "cache-write-input-token-count", "output": "output-tokens"}
    for (acct, model, kind), count in sorted(_folded(tokens).items()):
        if acct == account:
            writer.writerow([f"{day.isoformat()}T00:00:00Z", "AmazonBedrock", "Usage", f"APS1-{model}-{kinds[kind]}",
                             str(Decimal(count) / 1000), "1K tokens", str(_folded(money)[(acct, model, kind)]),
                             currency, "INV-1"])
    cur = folder / "cur" / "data" / f"BILLING_PERIOD={day:%Y-%m}"
    cur.mkdir(parents=True, exist_ok=True)
    (cur / "cur-00001.csv").write_text(out.getvalue())
    return {"path": str(folder / "logs"), "cur_path": str(folder / "cur")}


def write_google(folder: Path, tokens: dict, money: dict, currency: str, account: str, day: date) -> dict:
    names = {"input": "Input text token count", "cached_input": "Cached input token count",
             "cache_write": "Cache write token count", "output": "Output text token count",
             "reasoning": "Thinking output token count"}
    lines = [json.dumps({"service": {"description": "Vertex AI"}, "sku": {"description": f"{model} {names[kind]}"},
                         "usage_start_time": f"{day.isoformat()} 00:00:00 UTC", "cost_type": "regular",
                         "cost": float(money[(acct, model, kind)]), "currency": currency, "credits": [],
                         "usage": {"amount": count, "unit": "count"}, "invoice": {"month": f"{day:%Y%m}"}})
             for (acct, model, kind), count in sorted(tokens.items()) if acct == account]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "billing.json").write_text("\n".join(lines) + "\n")
    return {"path": str(folder)}


def write_azure(folder: Path, tokens: dict, money: dict, currency: str, account: str, day: date) -> dict:
    names = {"input": "Inp glbl Tokens", "cached_input": "cchd Inp glbl Tokens", "cache_write": "cache write Tokens",
             "output": "Outp glbl Tokens"}
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["Date", "MeterCategory", "MeterSubCategory", "MeterName", "Quantity", "UnitOfMeasure",
                     "CostInBillingCurrency", "BillingCurrency", "ChargeType", "InvoiceId"])
    for (acct, model, kind), count in sorted(_folded(tokens).items()):
        if acct == account:
            writer.writerow([f"{day:%m/%d/%Y}", "Cognitive Services", "Azure OpenAI", f"{model} {names[kind]}",
                             str(Decimal(count) / 1000), "1K", str(_folded(money)[(acct, model, kind)]), currency,
                             "Usage", "G1"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cost.csv").write_text(out.getvalue())
    return {"path": str(folder)}


def _folded(values: dict) -> dict:
    """Reasoning billed as output (AWS, Azure): the export has no reasoning line."""
    out: dict = defaultdict(lambda: type(next(iter(values.values()), 0))())
    for (acct, model, kind), v in values.items():
        out[(acct, model, "output" if kind == "reasoning" else kind)] += v
    return dict(out)


def reconcile_connectors(root: Path, book: PriceBook, fx: FxTable, day: date = DAY, runs: int = 3) -> dict:
    """Each connector: rows compared and flagged, and the median of ``runs`` timings (parse + ours + report)."""
    attempts = day_attempts(root, day)
    tokens, money, currency = totals(attempts, book)
    requests: dict[tuple[str, str], int] = defaultdict(int)
    for a in attempts:
        requests[(a["account"], a["model"])] += 1
    accounts = sorted({a["account"] for a in attempts})
    ours_models = sorted({a["model"] for a in attempts})
    out: dict[str, Any] = {"day": day.isoformat(), "attempts": len(attempts)}
    with tempfile.TemporaryDirectory() as tmp:
        built = {}
        for account in accounts:
            base = Path(tmp) / account
            built[account] = {
                "openai": openai_export(tokens, money, currency, account, day, requests),
                "anthropic": anthropic_export(tokens, money, currency, account, day),
                "aws": write_aws(base / "aws", attempts, tokens, money, currency, account, day),
                "google": write_google(base / "google", tokens, money, currency, account, day),
                "azure": write_azure(base / "azure", tokens, money, currency, account, day)}
        for connector in ("openai", "anthropic", "aws", "google", "azure"):
            seconds, report = [], None
            for _ in range(runs):
                started = time.perf_counter()
                usage, costs = [], []
                for account in accounts:
                    u, c = _parse(connector, built[account][connector], account, day, ours_models)
                    usage, costs = usage + u, costs + c
                ours = our_side(root, day, book, fx, {c.account: c.currency for c in costs})
                report = build_report(day, dict.fromkeys(accounts, connector), usage, costs, ours.usage, ours.money,
                                      threshold=DEFAULT_THRESHOLD, unattributed_expired=ours.unattributed_expired,
                                      current_price_version=ours.current_price_version)
                seconds.append(time.perf_counter() - started)
            assert report is not None
            out[connector] = {"seconds": round(statistics.median(seconds), 2), "rows": len(report.rows),
                              "flagged": len(report.flagged)}
    return out


def _parse(connector: str, built: Any, account: str, day: date, models: list[str]) -> tuple[list, list]:
    if connector == "openai":
        pages, costs = built
        usage = [r for kind, body in pages.items() for r in parse_openai_usage(body, account, kind)]
        return usage, parse_openai_costs(costs, account)
    if connector == "anthropic":
        usage, costs = built
        return parse_anthropic_usage(usage, account), parse_anthropic_costs(costs, account)
    return read_file_export(connector, account, day, built["path"], built.get("cur_path"), {}, models)
