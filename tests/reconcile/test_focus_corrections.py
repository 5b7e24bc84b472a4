"""FOCUS corrections: reversal + corrected rows, billed in the next open period, append-only, never counted twice."""

from __future__ import annotations

import csv
from dataclasses import replace
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from reconcile.focus.corrections import Correction, read_corrections, write_corrections
from reconcile.focus.export import FocusError, export_focus
from tests.reconcile.focus_archive import BOOK, CURRENCY, FX, UTC, month_events, write_archive

MICRO = Decimal("0.000001")


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    return write_archive(tmp_path_factory.mktemp("corrections") / "archive", month_events())


def rerated(original: dict[str, str], *, recorded_at: datetime, cid: str = "rerate-1/0001") -> Correction:
    """A hand-made correction of one exported November row: re-rated from price version 1 to version 2."""
    tokens = int(Decimal(original["ConsumedQuantity"]))
    return Correction(
        correction_id=cid, recorded_at=recorded_at, charge_day=date.fromisoformat(original["ChargePeriodStart"][:10]),
        deployment=original["ResourceId"], provider=original["ProviderName"], account=original["SubAccountId"],
        model=original["SkuId"].split(":")[0], region=original["RegionId"], token_type=original["x_token_type"],
        team=original["x_team"], app=original["x_app"], business_unit=original["x_business_unit"],
        key_id=original["x_key_id"], alias=original["x_alias"], requests=int(original["x_requests"]),
        attempts=int(original["x_attempts"]), original_price_version=1, original_tokens=tokens,
        original_micro=int(Decimal(original["BilledCost"]) / MICRO), corrected_price_version=2,
        corrected_tokens=tokens, corrected_micro=int(Decimal(original["BilledCost"]) / MICRO) - 12_345,
        reason="azure-eu v1 input price was wrong")


def test_billing_period_is_the_first_open_one():
    base = dict(correction_id="c", deployment="d", provider="p", account="a", model="m", region="r",
                token_type="input", team="t", original_price_version=1, original_tokens=1, original_micro=1,
                corrected_price_version=2, corrected_tokens=1, corrected_micro=1)
    same_month = Correction(recorded_at=datetime(2026, 11, 20, tzinfo=UTC), charge_day=date(2026, 11, 5), **base)
    later = replace(same_month, recorded_at=datetime(2027, 2, 3, tzinfo=UTC))
    december_31 = replace(same_month, charge_day=date(2026, 12, 31), recorded_at=datetime(2027, 1, 1, tzinfo=UTC))
    assert same_month.billing_month == date(2026, 12, 1)  # never the charge's own (final) period
    assert later.billing_month == date(2027, 2, 1)  # the periods in between had closed
    assert december_31.billing_month == date(2027, 1, 1)
    with pytest.raises(ValueError, match="token_type"):
        replace(same_month, token_type="images")
    with pytest.raises(ValueError, match="corrected_micro must be a non-negative int"):
        replace(same_month, corrected_micro=-1)
    with pytest.raises(ValueError, match="timezone-aware"):
        replace(same_month, recorded_at=datetime(2026, 11, 20))


def test_reversal_and_corrected_rows_in_the_next_period_and_the_charge_month_unchanged(archive, tmp_path):
    before = export_focus(archive, "2026-11", BOOK, FX, tmp_path / "nov-before.csv").path.read_bytes()
    nov = read_csv(tmp_path / "nov-before.csv")
    original = next(r for r in nov if r["ResourceId"] == "azure-eu" and r["x_price_version"] == "1"
                    and r["SkuMeter"] == "Input Tokens" and r["ChargePeriodStart"].startswith("2026-11-0"))
    fix = rerated(original, recorded_at=datetime(2026, 11, 28, tzinfo=UTC))
    after = export_focus(archive, "2026-11", BOOK, FX, tmp_path / "nov-after.csv", [fix]).path.read_bytes()
    assert after == before  # the charge month's file is final: corrections never edit it

    plain = export_focus(archive, "2026-12", BOOK, FX, tmp_path / "dec-plain.csv")
    summary = export_focus(archive, "2026-12", BOOK, FX, tmp_path / "dec.csv", [fix, fix])  # twice: read once
    rows = read_csv(tmp_path / "dec.csv")
    fixes = [r for r in rows if r["ChargeClass"] == "Correction"]
    assert summary.correction_rows == 2 == len(fixes) and summary.usage_rows == plain.usage_rows
    assert [r["x_correction_side"] for r in fixes] == ["reversal", "corrected"]
    reversal, corrected = fixes
    for r in fixes:
        assert r["ChargePeriodStart"] == original["ChargePeriodStart"]  # where the cost was incurred
        assert (r["BillingPeriodStart"], r["BillingPeriodEnd"]) == ("2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z")
        assert r["ChargeCategory"] == "Usage" and r["x_correction_id"] == "rerate-1/0001"
        assert r["SkuPriceId"] == original["SkuPriceId"] and r["SkuMeter"] == "Input Tokens"
        assert Decimal(r["ListCost"]) == Decimal(r["ListUnitPrice"]) * Decimal(r["PricingQuantity"])
    assert Decimal(reversal["ConsumedQuantity"]) == -Decimal(original["ConsumedQuantity"])
    assert Decimal(reversal["BilledCost"]) == -Decimal(original["BilledCost"])
    assert reversal["ListUnitPrice"] == original["ListUnitPrice"] and reversal["x_price_version"] == "1"
    nov_unit = BOOK.get(2).price("azure-eu").per_million("input") * FX.rate("USD", CURRENCY, datetime(2026, 11, 1,
                                                                                                       tzinfo=UTC))
    assert Decimal(corrected["ListUnitPrice"]) == nov_unit and corrected["x_price_version"] == "2"
    assert Decimal(corrected["ConsumedQuantity"]) == Decimal(original["ConsumedQuantity"])
    # net effect: what should have been billed, nothing counted twice
    net = sum(Decimal(r["BilledCost"]) for r in fixes)
    assert net == Decimal(-12_345) * MICRO and summary.correction_micro == -12_345
    usage = sum(Decimal(r["BilledCost"]) for r in rows if not r["ChargeClass"])
    assert usage == Decimal(plain.ledger_micro) * MICRO == Decimal(summary.ledger_micro) * MICRO
    assert sum(Decimal(r["ConsumedQuantity"]) for r in fixes) == 0


def test_late_correction_goes_to_the_month_it_was_recorded_in(archive, tmp_path):
    nov = read_csv(export_focus(archive, "2026-11", BOOK, FX, tmp_path / "nov.csv").path)
    original = next(r for r in nov if r["x_price_version"] == "1")
    fix = rerated(original, recorded_at=datetime(2027, 1, 9, tzinfo=UTC))
    dec = export_focus(archive, "2026-12", BOOK, FX, tmp_path / "dec.csv", [fix])
    assert dec.correction_rows == 0
    with pytest.raises(FocusError, match="corrections but no usage"):  # January has no usage in the archive
        export_focus(archive, "2027-01", BOOK, FX, tmp_path / "jan.csv", [fix])
    jan = export_focus(archive, "2027-01", BOOK, FX, tmp_path / "jan.csv", [fix], currency=CURRENCY)
    rows = read_csv(jan.path)
    assert jan.rows == 2 and {r["BillingPeriodStart"] for r in rows} == {"2027-01-01T00:00:00Z"}
    assert {r["ChargePeriodStart"] for r in rows} == {original["ChargePeriodStart"]}


def test_conflicting_duplicate_and_unpriceable_corrections_are_refused(archive, tmp_path):
    nov = read_csv(export_focus(archive, "2026-11", BOOK, FX, tmp_path / "nov.csv").path)
    fix = rerated(nov[0], recorded_at=datetime(2026, 12, 2, tzinfo=UTC))
    with pytest.raises(FocusError, match="appears twice with different content"):
        export_focus(archive, "2026-12", BOOK, FX, tmp_path / "dec.csv", [fix, replace(fix, corrected_micro=1)])
    with pytest.raises(FocusError, match="price version 7"):
        export_focus(archive, "2026-12", BOOK, FX, tmp_path / "dec.csv", [replace(fix, corrected_price_version=7)])
    assert not (tmp_path / "dec.csv").exists()


def test_corrections_parquet_shape_round_trips(tmp_path):
    fix = Correction(correction_id="rr/1", recorded_at=datetime(2026, 12, 1, 5, tzinfo=UTC),
                     charge_day=date(2026, 11, 3), deployment="d", provider="p", account="a", model="m",
                     region="r", token_type="cached_input", team="t", app="bot", key_id="k", alias="chat",
                     cost_centre="cc-42", tags={"env": "prod", "cost": "x"}, original_price_version=1,
                     original_tokens=10, original_micro=20, corrected_price_version=2, corrected_tokens=11,
                     corrected_micro=19, requests=1, attempts=1, reason="why")
    write_corrections(tmp_path / "corrections" / "2026-12" / "part-0.parquet", [fix])
    assert read_corrections(tmp_path / "corrections") == [fix]
    assert fix.tags == (("cost", "x"), ("env", "prod"))
    assert read_corrections(tmp_path / "none") == []
    (tmp_path / "corrections" / "bad.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(FocusError, match="bad.parquet: not a readable corrections file"):
        read_corrections(tmp_path / "corrections")
    assert timedelta(0) == fix.recorded_at.utcoffset()
