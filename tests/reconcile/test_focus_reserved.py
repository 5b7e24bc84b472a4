"""Provisioned capacity in the FOCUS export: a recurring Purchase row a day billing the reserved hours once, the
used hours' cost spread over who was served and the unused hours' to the owning team (BilledCost 0, EffectiveCost
adding up to the purchases), with FOCUS 1.2's commitment columns; the file still passes focus-validator."""

from __future__ import annotations

import csv
import random
from collections import defaultdict
from datetime import datetime
from decimal import Decimal

import pytest

from pricing.book import Price, PriceBook, PriceVersion
from reconcile.focus.export import export_focus
from tests.reconcile.focus_archive import BOOK, CURRENCY, FX, UTC, month_events, request, write_archive
from tests.reconcile.focus_validator_run import run_validator
from tests.reconcile.test_focus_validator import _check

RESERVED = Price(input=Decimal(0), output=Decimal(0), reserved_month=Decimal("7200.00"), reserved_team="search")
RESERVED_BOOK = PriceBook.of([PriceVersion(v.version, v.valid_from, {**v.prices, "ptu-pune": RESERVED})
                              for v in BOOK.versions])
RESERVED_DEP = {"ptu-pune": ("azure", "sub-ptu-1", "gpt-4o", "centralindia")}
HOUR = Decimal("7200.00") / 720 * Decimal("84.3310")  # INR an hour in November (720 hours): 843.310000
DAYS = range(2, 31, 4)  # the reservation serves one request at 09:20 UTC on these days of November


def reserved_events() -> list:
    rng, events = random.Random(5), []
    ids = [n for n in range(6_001, 6_100) if n % 7]  # request() fails over on every seventh: one deployment here
    for i, day in zip(ids, DAYS):
        events += request(i, datetime(2026, 11, day, 9, 20, tzinfo=UTC), rng, book=RESERVED_BOOK,
                          deployments=RESERVED_DEP)
    return events


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    return write_archive(tmp_path_factory.mktemp("reserved") / "archive", month_events() + reserved_events())


def _rows(path) -> list[dict]:
    with open(path, newline="") as f:
        return [r for r in csv.DictReader(f) if r["CommitmentDiscountId"]]


def test_the_reservation_is_purchased_once_a_day_and_its_use_adds_up_to_it(archive, tmp_path):
    summary = export_focus(archive, "2026-11", RESERVED_BOOK, FX, tmp_path / "nov.csv", currency=CURRENCY)
    assert summary.reserved_micro == int(HOUR * 720 * 1_000_000)  # every hour of a closed month, once
    assert summary.billed_micro == summary.ledger_micro  # the token rows still equal the ledger (at 0 here)
    rows = _rows(summary.path)
    assert summary.reserved_rows == len(rows)
    purchases = [r for r in rows if r["ChargeCategory"] == "Purchase"]
    assert len(purchases) == 30 and {Decimal(r["BilledCost"]) for r in purchases} == {HOUR * 24}
    assert {(Decimal(r["EffectiveCost"]), r["x_team"], Decimal(r["CommitmentDiscountQuantity"]),
             r["ChargeFrequency"], r["CommitmentDiscountStatus"]) for r in purchases} == {
        (0, "search", 24, "Recurring", "")}
    effective: dict[str, Decimal] = defaultdict(Decimal)
    for row in rows:
        assert row["CommitmentDiscountId"] == "azure/sub-ptu-1/ptu-pune/provisioned"
        assert row["CommitmentDiscountUnit"] == "Hours" and row["CommitmentDiscountCategory"] == "Usage"
        if row["ChargeCategory"] == "Usage":
            assert Decimal(row["BilledCost"]) == 0
            effective[row["ChargePeriodStart"]] += Decimal(row["EffectiveCost"])
    assert effective == {r["ChargePeriodStart"]: Decimal(r["BilledCost"]) for r in purchases}  # FOCUS's sums
    used = [r for r in rows if r["CommitmentDiscountStatus"] == "Used"]
    assert len(used) == len(DAYS)  # each used hour's whole cost to the one request in it
    assert all(Decimal(r["EffectiveCost"]) == HOUR and Decimal(r["ConsumedQuantity"]) == 1 for r in used)
    unused = [r for r in rows if r["CommitmentDiscountStatus"] == "Unused"]
    assert {r["x_team"] for r in unused} == {"search"} and all(r["ConsumedQuantity"] == "" for r in unused)
    assert sum(Decimal(r["CommitmentDiscountQuantity"]) for r in unused) == 720 - len(DAYS)


def test_a_month_with_a_reservation_passes_focus_validator(archive, tmp_path):
    summary = export_focus(archive, "2026-11", RESERVED_BOOK, FX, tmp_path / "nov.csv", currency=CURRENCY)
    _check(run_validator(summary.path, tmp_path / "report.xml"))


# focus-validator 2.2.1's model encodes CommitmentDiscountStatus-C-004-C ("MUST NOT be null when
# CommitmentDiscountId is not null and ChargeCategory is Usage") with the condition "CommitmentDiscountId is null":
# the opposite of C-003-C under the same condition, so no file with a charge outside a commitment passes both.
# That rule (and the two composites over it) is the validator's; every other commitment rule must pass.
INVERTED = {"CommitmentDiscountStatus-C-004-C", "CommitmentDiscountStatus-C-002-C", "CommitmentDiscountStatus-C-000-C"}


def test_the_commitment_columns_pass_focus_validators_commitment_rules(archive, tmp_path):
    summary = export_focus(archive, "2026-11", RESERVED_BOOK, FX, tmp_path / "nov.csv", currency=CURRENCY)
    report = run_validator(summary.path, tmp_path / "report.xml", ("COMMITMENT_DISCOUNT_SUPPORTED",))
    assert {f.split(" ::")[0] for f in report.failed} == INVERTED and not report.errored, report.explain()
    checked = {p for p in report.passes if p.startswith("CommitmentDiscount")}
    assert {"CommitmentDiscountStatus-C-003-C", "CommitmentDiscountStatus-C-005-M", "CommitmentDiscountId-C-000-C",
            "CommitmentDiscountCategory-C-005-M", "CommitmentDiscountQuantity-C-005-C",
            "CommitmentDiscountUnit-C-006-C", "CommitmentDiscountName-C-004-C"} <= checked
    assert len(checked) >= 30
