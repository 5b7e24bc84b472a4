"""A fleet paid by the GPU-hour in the FOCUS export: every hour of the month billed once, the hours it served
attributed to the teams it served, the idle ones as rows of their own, and the file still passes
focus-validator."""

from __future__ import annotations

import csv
import random
from datetime import datetime
from decimal import Decimal

import pytest

from pricing.book import Price, PriceBook, PriceVersion
from reconcile.focus.export import export_focus
from tests.reconcile.focus_archive import BOOK, CURRENCY, FX, UTC, month_events, request, write_archive
from tests.reconcile.focus_validator_run import run_validator
from tests.reconcile.test_focus_validator import _check

FLEET = Price(input=Decimal(0), output=Decimal(0), gpu_hour=Decimal("2.40"), gpus=4)
FLEET_BOOK = PriceBook.of([PriceVersion(v.version, v.valid_from, {**v.prices, "fleet-pune": FLEET})
                           for v in BOOK.versions])
FLEET_DEP = {"fleet-pune": ("self-hosted", "gpu-pool-a", "llama-3.3-70b", "ap-south-1")}
HOUR = Decimal("2.40") * 4 * Decimal("84.3310")  # INR an hour in November: 809.577600
DAYS = range(1, 31, 3)  # the fleet serves one request at 10:15 UTC on these days of November


def fleet_events() -> list:
    rng, events = random.Random(11), []
    ids = [n for n in range(5_001, 5_100) if n % 7]  # request() fails over on every seventh: one fleet here
    for i, day in zip(ids, DAYS):
        events += request(i, datetime(2026, 11, day, 10, 15, tzinfo=UTC), rng, book=FLEET_BOOK,
                          deployments=FLEET_DEP)
    return events


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    return write_archive(tmp_path_factory.mktemp("fleet") / "archive", month_events() + fleet_events())


def _fleet_rows(path) -> list[dict]:
    with open(path, newline="") as f:
        return [r for r in csv.DictReader(f) if r["ConsumedUnit"] == "GPU-Hours"]


def test_every_fleet_hour_is_billed_once_and_attributed_by_tokens(archive, tmp_path):
    summary = export_focus(archive, "2026-11", FLEET_BOOK, FX, tmp_path / "nov.csv", currency=CURRENCY)
    assert summary.fleet_micro == int(HOUR * 720 * 1_000_000)  # 30 days x 24 hours, a closed month
    assert summary.billed_micro == summary.ledger_micro  # the token rows still equal the ledger
    rows = _fleet_rows(summary.path)
    assert summary.fleet_rows == len(rows)
    by_day: dict[str, Decimal] = {}
    for row in rows:
        by_day[row["ChargePeriodStart"]] = by_day.get(row["ChargePeriodStart"], Decimal(0)) + Decimal(row["BilledCost"])
        assert row["ChargeFrequency"] == "Recurring" and row["PricingUnit"] == "GPU-Hours"
        assert Decimal(row["ListUnitPrice"]) == Decimal("2.40") * Decimal("84.3310")
    assert len(by_day) == 30 and set(by_day.values()) == {HOUR * 24}
    served = [r for r in rows if r["x_team"]]
    assert len(served) == len(DAYS)  # each served hour's whole cost to the one request in it
    for row in served:
        assert Decimal(row["BilledCost"]) == HOUR and Decimal(row["ConsumedQuantity"]) == Decimal("4.000000")
        assert row["x_requests"] == "1" and row["ResourceId"] == "fleet-pune"
    idle = [r for r in rows if not r["x_team"]]
    assert sum(Decimal(r["ConsumedQuantity"]) for r in idle) == 4 * (720 - len(DAYS))
    assert all("idle GPU hours" in r["ChargeDescription"] for r in idle)


def test_a_month_with_fleet_hours_passes_focus_validator(archive, tmp_path):
    summary = export_focus(archive, "2026-11", FLEET_BOOK, FX, tmp_path / "nov.csv", currency=CURRENCY)
    _check(run_validator(summary.path, tmp_path / "report.xml"))


def test_hours_before_the_fleet_was_priced_by_the_hour_are_not_billed(archive, tmp_path):
    """Token prices only until a version from 20 November gives the fleet its GPU-hour price."""
    tokens_only = Price(input=Decimal(0), output=Decimal(0))
    versions = [PriceVersion(v.version, v.valid_from, {**v.prices, "fleet-pune": tokens_only}) for v in BOOK.versions]
    later = PriceVersion(3, datetime(2026, 11, 20, tzinfo=UTC), {**BOOK.versions[1].prices, "fleet-pune": FLEET})
    summary = export_focus(archive, "2026-11", PriceBook.of([*versions, later]), FX, tmp_path / "late.csv",
                           currency=CURRENCY)
    assert summary.fleet_micro == int(HOUR * 24 * 11 * 1_000_000)  # 20 November 00:00 to the month's end
    rows = _fleet_rows(summary.path)
    assert min(r["ChargePeriodStart"] for r in rows).startswith("2026-11-20")
    assert {r["x_price_version"] for r in rows} == {"3"}
