"""reconcile.report: assembly of token and money rows, the content hash and event id, the three renderings."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace
from datetime import date, datetime, timezone
from decimal import Decimal

from ledger.codec import decode, encode
from ledger.reconcile_events import ReconcileReported
from reconcile.drift import OurUsage
from reconcile.exports import CostRow, UsageRow
from reconcile.report import build_report, content_hash, exit_code, render, report_json, reported_event

DAY = date(2026, 11, 20)
NOW = datetime(2026, 11, 21, 0, 15, tzinfo=timezone.utc)
PROVIDERS = {"acct-sim": "sim-openai", "acct-oai": "openai"}


def usage(account: str, token_type: str, tokens: int, day: date = DAY, provider: str = "x") -> UsageRow:
    return UsageRow(provider, account, day, "m1", token_type, tokens, 3)


def ours(account: str, token_type: str, tokens: int, cost_micro: int = 0, currency: str = "INR",
         estimated: int = 0) -> OurUsage:
    return OurUsage(account, DAY, "m1", token_type, tokens, estimated, cost_micro=cost_micro, currency=currency,
                    price_versions=frozenset({1}))


def build(provider_output: int = 1000, *, extra_ours: list[OurUsage] | None = None):
    provider = [usage("acct-sim", "input", 500, provider="sim-openai"),
                usage("acct-sim", "output", provider_output, provider="sim-openai"),
                usage("acct-oai", "input", 200, provider="openai"),
                usage("acct-sim", "output", 999, day=date(2026, 11, 19), provider="sim-openai")]  # another day
    costs = [CostRow("openai", "acct-oai", DAY, "m1", "input", Decimal("0.0004"), "USD")]
    mine = [ours("acct-sim", "input", 500, 88_000), ours("acct-sim", "output", 1000, 880_000, estimated=100),
            ours("acct-oai", "input", 200, 35_200), *(extra_ours or [])]
    mine_usd = [ours("acct-oai", "input", 200, 400, "USD"), ours("acct-sim", "input", 500, 1000, "USD")]
    return build_report(DAY, PROVIDERS, provider, costs, mine, mine_usd, threshold=Decimal(1),
                        current_price_version=1)


def test_tokens_for_every_account_money_only_where_the_provider_bills():
    report = build()
    keys = [(r.measure, r.account, r.token_type) for r in report.rows]
    assert keys == [("tokens", "acct-oai", "input"), ("tokens", "acct-sim", "input"),
                    ("tokens", "acct-sim", "output"), ("money", "acct-oai", "input")]
    money = report.rows[-1]
    assert (money.provider_figure, money.ours, money.currency, money.flagged) == (Decimal("0.0004"),
                                                                                  Decimal("0.0004"), "USD", False)
    assert report.accounts == ("acct-oai", "acct-sim") and exit_code(report) == 0


def test_a_flagged_row_exits_1_and_names_its_cause():
    report = build(provider_output=1020)  # 20 / 1020 = 1.96%
    (row,) = report.flagged
    assert (row.account, row.token_type, row.percent.quantize(Decimal("0.01"))) == ("acct-sim", "output",
                                                                                    Decimal("1.96"))
    assert [c.code for c in row.causes] == ["estimated_usage"]
    assert exit_code(report) == 1


def test_a_row_only_we_have_carries_the_accounts_provider():
    report = build(extra_ours=[ours("acct-sim", "cached_input", 50, 100)])
    (row,) = [r for r in report.rows if r.token_type == "cached_input"]
    assert (row.provider, row.provider_figure, row.flagged) == ("sim-openai", Decimal(0), True)


def test_the_hash_covers_the_figures_not_the_run():
    first, again, drifted = build(), build(), build(provider_output=1020)
    assert content_hash(first) == content_hash(again) != content_hash(drifted)
    assert report_json(first, "e") == report_json(again, "e")
    a, b = reported_event(first, NOW), reported_event(again, NOW.replace(hour=3))
    assert a.id == b.id  # a re-run of an unchanged day: the log keeps one
    assert reported_event(drifted, NOW).id != a.id  # changed figures: a new version of the day's report
    assert a.id.startswith("reconcile/2026-11-20/") and (a.rows, a.flagged) == (4, 0)
    assert reported_event(replace(first, threshold=Decimal(2)), NOW).id != a.id


def test_the_event_round_trips_through_the_codec():
    event = reported_event(build(provider_output=1020), NOW)
    assert isinstance(decode(encode(event)), ReconcileReported) and decode(encode(event)) == event
    assert json.loads(encode(event))["key"] is None


def test_json_csv_and_table():
    report = build(provider_output=1020)
    doc = json.loads(render(report, "json", "ev-1"))
    assert (doc["day"], doc["flagged"], doc["event_id"], doc["threshold_pct"]) == ("2026-11-20", 1, "ev-1", "1")
    assert doc["content_hash"] == content_hash(report) and len(doc["rows"]) == 4
    rows = list(csv.DictReader(io.StringIO(render(report, "csv"))))
    flagged = [r for r in rows if r["flagged"] == "yes"]
    assert [(r["account"], r["percent"], r["causes"][:16]) for r in flagged] == [("acct-sim", "1.96",
                                                                                  "estimated_usage:")]
    table = render(report, "table").splitlines()
    assert table[0] == ("reconciliation 2026-11-20: 4 rows, 1 flagged beyond 1% (acct-oai, acct-sim)")
    assert table[1].split() == ["measure", "account", "model", "type", "tier", "provider", "ours", "difference",
                                "%", "flagged"]
    assert any(line.startswith("    cause estimated_usage: 10.00% of our 1000 tokens (100)") for line in table)


def test_usage_a_provider_reported_invalidly_is_named_as_such():
    from reconcile.drift_causes import usage_causes as _usage_causes  # the causes of a flagged row, from our rows alone

    invalid = replace(ours("acct-sim", "output", 1000, 880_000, estimated=100), invalid_tokens=60)
    causes = _usage_causes(("acct-sim", DAY, "m1", "output", None), [invalid], True, {})
    assert [c.code for c in causes] == ["estimated_usage", "provider_invalid_usage"]
    assert "60 of them replace usage the provider reported invalidly" in causes[1].detail
