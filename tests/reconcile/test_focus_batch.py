"""A provider batch in FOCUS: its lines are one admitted request with one attempt per line at the deployment's
``batch`` price (``proxy.batches.provider_money``); FOCUS shows them as rows of their own (PricingCategory
``Other``, ``x_service_tier`` ``batch``, their own SkuPriceId), billing exactly what the ledger settled, and the
file still passes focus-validator."""

from __future__ import annotations

import csv
from datetime import datetime, timedelta
from decimal import Decimal

import pytest

from ledger.events import RequestAdmitted, RequestAttempted, RequestSettled
from ledger.usage import TokenUsage
from pricing.book import Price, PriceBook, PriceVersion, tier_key
from pricing.rating import rate
from reconcile.focus.export import export_focus
from tests.reconcile.focus_archive import BOOK, CURRENCY, FX, UTC, month_events, write_archive
from tests.reconcile.focus_validator_run import run_validator
from tests.reconcile.test_focus_validator import _check

BATCH = Price(input=Decimal("0.075"), cached_input=Decimal("0.0375"), output=Decimal("0.30"), reasoning=Decimal("0.30"))
BATCH_BOOK = PriceBook.of([PriceVersion(v.version, v.valid_from, {**v.prices, tier_key("oai-mumbai", "batch"): BATCH})
                           for v in BOOK.versions])
LINES = 40


def batch_events(batch_id: str = "batch_" + "ab" * 12) -> list:
    at = datetime(2026, 11, 20, 3, 0, tzinfo=UTC)
    scopes = {"team:search": 90_000_000}
    events: list = [RequestAdmitted(
        time=at, request_id=batch_id, team="search", key_id="fb-sea-0", business_unit="retail", app="summaries",
        run_id=None, alias="chat-default", data_class="internal", est_input_tokens=40 * LINES,
        max_output_tokens=256 * LINES, holds=scopes, currency=CURRENCY, price_version=2, pod="pod-a",
        hold_ttl_s=90_000, stream=False, tags={"fb.batch": batch_id, "fb.priority": "batch"})]
    total = 0
    for n in range(1, LINES + 1):
        when = at + timedelta(hours=2)
        usage = TokenUsage(input=30 + n, cached_input=8 if n % 3 == 0 else 0, output=10 + n, service_tier="batch")
        cost = rate(usage, BATCH, FX.rate("USD", CURRENCY, when))
        total += cost
        events.append(RequestAttempted(
            time=when, request_id=batch_id, team="search", attempt=n, deployment="oai-mumbai", provider="openai",
            account="org-retail", model="gpt-4o-mini", region="ap-south-1", outcome="ok", status=200, ttft_ms=None,
            latency_ms=0, usage=usage, cost_micro=cost, currency=CURRENCY, price_version=2, error_code=None))
    events.append(RequestSettled(
        time=at + timedelta(hours=2), request_id=batch_id, team="search", final_status=200, attempts=LINES,
        deployment="oai-mumbai", usage=TokenUsage(), cost_micro=total, currency=CURRENCY,
        cost_by_scope={"team:search": total}, hold_released=scopes, overrun_micro=0, cache_hit=False, latency_ms=0))
    return events


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    return write_archive(tmp_path_factory.mktemp("batch") / "archive", month_events() + batch_events())


def test_a_provider_batchs_lines_are_rows_of_their_own_billing_what_was_settled(archive, tmp_path):
    summary = export_focus(archive, "2026-11", BATCH_BOOK, FX, tmp_path / "nov.csv", currency=CURRENCY)
    assert summary.billed_micro == summary.ledger_micro
    with open(summary.path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["x_service_tier"] == "batch"]
    assert rows and {r["PricingCategory"] for r in rows} == {"Other"}
    assert all(r["SkuPriceId"].endswith("@batch") and r["x_team"] == "search" for r in rows)
    settled = batch_events()[-1].cost_micro
    assert sum(Decimal(r["BilledCost"]) for r in rows) == Decimal(settled) / 1_000_000
    assert sum(int(r["x_attempts"] or 0) for r in rows if r["x_token_type"] == "input") == LINES


def test_a_month_with_a_provider_batch_passes_focus_validator(archive, tmp_path):
    summary = export_focus(archive, "2026-11", BATCH_BOOK, FX, tmp_path / "nov.csv", currency=CURRENCY)
    _check(run_validator(summary.path, tmp_path / "report.xml"))
