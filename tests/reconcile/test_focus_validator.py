"""The FOCUS export of a test month passes the FinOps Foundation's focus-validator (run for real, never skipped).

focus-validator 1.0.0 validates FOCUS 1.0; the export carries that version's
required columns beside the 1.2 ones. The test month is built from real
archive files (``streams.archive.write.ArchiveWriter``) of realistic events: several
days, three deployments from three providers, every token type, four teams,
fallbacks, a price change, and correction rows in the following month.
"""

from __future__ import annotations

from datetime import date, datetime

import pytest

from reconcile.focus.columns import DECIMAL_COLUMNS
from reconcile.focus.corrections import Correction
from reconcile.focus.export import export_focus
from tests.reconcile.focus_archive import BOOK, CURRENCY, FX, UTC, month_events, write_archive
from tests.reconcile.focus_validator_run import run_validator


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    return write_archive(tmp_path_factory.mktemp("validator") / "archive", month_events())


def test_csv_export_passes_focus_validator(archive, tmp_path):
    summary = export_focus(archive, "2026-11", BOOK, FX, tmp_path / "nov.csv", currency=CURRENCY)
    assert summary.rows > 500
    report = run_validator(summary.path, tmp_path / "report.xml")
    assert report.passed, "focus-validator failed:\n" + "\n".join(report.failed + report.errored) + report.output
    assert report.tests >= 130 and report.skipped == 0


def test_month_with_correction_rows_passes_focus_validator(archive, tmp_path):
    fix = Correction(correction_id="rerate-7/1", recorded_at=datetime(2026, 12, 2, tzinfo=UTC),
                     charge_day=date(2026, 11, 4), deployment="azure-eu", provider="azure", account="sub-eu-7",
                     model="gpt-4o", region="westeurope", token_type="output", team="search", app="summaries",
                     key_id="fb-sea-1", alias="chat-default", tags={"project": "q4-launch"},
                     original_price_version=1, original_tokens=12_000, original_micro=10_119_720,
                     corrected_price_version=2, corrected_tokens=12_000, corrected_micro=8_905_354, requests=9,
                     attempts=9)
    summary = export_focus(archive, "2026-12", BOOK, FX, tmp_path / "dec.csv", [fix], currency=CURRENCY)
    assert summary.correction_rows == 2
    report = run_validator(summary.path, tmp_path / "report.xml")
    assert report.passed, "focus-validator failed:\n" + "\n".join(report.failed + report.errored) + report.output


def test_parquet_export_fails_only_the_validators_float_dtype_check(archive, tmp_path):
    """Parquet keeps money exact (decimal128). focus-validator 1.0.0 reads Parquet with pandas, which gives
    Python Decimal objects, and its Decimal check accepts only float columns; every other check passes."""
    summary = export_focus(archive, "2026-11", BOOK, FX, tmp_path / "nov.parquet", currency=CURRENCY)
    report = run_validator(summary.path, tmp_path / "report.xml")
    assert not report.errored, report.errored
    failed = {line.split(" ::")[0] for line in report.failed}
    required = {"BilledCost", "ConsumedQuantity", "ContractedCost", "ContractedUnitPrice", "EffectiveCost",
                "ListCost", "ListUnitPrice", "PricingQuantity"}
    assert failed == {f"{column}_IsDecimal" for column in required}, report.failed
    assert required <= DECIMAL_COLUMNS  # the columns farebox writes as exact decimals
