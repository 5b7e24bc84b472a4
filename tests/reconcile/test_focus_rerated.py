"""FOCUS Correction rows from archived rating.corrected events: usage + corrections bill the re-rated cost."""

from __future__ import annotations

import csv
from datetime import date, datetime, timezone
from decimal import Decimal

from ledger.codec import encode
from ledger.events import RequestAttempted
from reconcile.focus.export import export_focus
from reconcile.focus.rerated import allocate, archived_corrections
from reconcile.rerate.archive import plan_rerate
from streams.archive.write import ArchiveWriter, Record
from tests.reconcile.focus_archive import FX, month_events, write_archive
from tests.reconcile.rerate_fixtures import BOOK4

UTC = timezone.utc


def _archive_fixes(root, fixes, first_offset):  # noqa: ANN001, ANN202
    ArchiveWriter(root, "log").write([Record(0, first_offset + n, encode(f)) for n, f in enumerate(fixes)])


def _billed(path) -> tuple[Decimal, Decimal]:  # noqa: ANN001
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    usage = sum(Decimal(r["BilledCost"]) for r in rows if r["ChargeClass"] != "Correction")
    fixes = sum(Decimal(r["BilledCost"]) for r in rows if r["ChargeClass"] == "Correction")
    for r in rows:  # every row keeps ListCost = ListUnitPrice x PricingQuantity
        assert Decimal(r["ListCost"]) == Decimal(r["ListUnitPrice"]) * Decimal(r["PricingQuantity"])
    return usage * 1_000_000, fixes * 1_000_000


def test_archived_corrections_bill_the_rerated_cost_to_the_micro_unit(tmp_path):
    events = month_events(count=120)
    root = write_archive(tmp_path / "archive", events)
    days = (date(2026, 11, 1), date(2026, 11, 30))
    to_v3 = plan_rerate(root, *days, BOOK4, FX, 3, now=datetime(2026, 12, 5, tzinfo=UTC)).corrections
    _archive_fixes(root, to_v3, 10**6)
    to_v4 = plan_rerate(root, *days, BOOK4, FX, 4, now=datetime(2026, 12, 6, tzinfo=UTC)).corrections
    _archive_fixes(root, to_v4, 2 * 10**6)
    assert to_v3 and to_v4

    fixes = archived_corrections(root, date(2026, 12, 1), BOOK4, FX, "INR")
    assert {c.billing_month for c in fixes} == {date(2026, 12, 1)}
    net = sum(f.cost_micro - f.old_cost_micro for f in (*to_v3, *to_v4))
    assert sum(c.corrected_micro - c.original_micro for c in fixes) == net
    # the first correction reverses exactly what the usage rows billed for each attempt
    attempts = {(e.request_id, e.attempt): e.cost_micro for e in events if isinstance(e, RequestAttempted)}
    for fix in to_v3:
        for n in fix.attempt_costs:
            mine = [c for c in fixes if c.correction_id.startswith(f"{fix.id}/{n}/")]
            assert sum(c.original_micro for c in mine) == attempts[(fix.request_id, int(n))]
    summary = export_focus(root, "2026-12", BOOK4, FX, tmp_path / "dec.csv", fixes, currency="INR")
    usage, corrections = _billed(tmp_path / "dec.csv")
    assert corrections == net == summary.correction_micro
    assert usage == summary.ledger_micro
    assert archived_corrections(root, date(2026, 11, 1), BOOK4, FX, "INR") == []  # November's file is final


def test_allocation_hands_out_the_rounded_up_micro_units_to_the_largest_fractions():
    prices = [Decimal("0.15"), Decimal("0.075"), Decimal(0), Decimal("0.6"), Decimal("0.6")]
    tokens = [3, 3, 0, 1, 0]  # exact 0.45 + 0.225 + 0.6 = 1.275 -> charged 2
    assert allocate(2, tokens, prices) == [1, 0, 0, 1, 0]  # fractions 0.6 (output) and 0.45 (input) win
    import pytest

    from reconcile.focus.columns import FocusError

    with pytest.raises(FocusError, match="not the one"):
        allocate(3, tokens, prices)
