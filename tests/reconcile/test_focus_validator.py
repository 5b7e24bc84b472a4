"""The FOCUS export of a test month passes the FinOps Foundation's focus-validator 2.2.1 on FOCUS 1.2 rules
(run for real in its own venv, never skipped).

The test month is built from real archive files (``streams.archive.write.ArchiveWriter``) of realistic events:
several days, three deployments from three providers (two with a project, one without), every token type, four
teams, fallbacks, a served tier, a price change, and correction rows in the following month. The validator runs
with the applicability criteria that hold for farebox (``focus_validator_run.CRITERIA``), so the rules gated on
sub-accounts, regions, tags, unit prices and currency differences are checked, not skipped.

Zero failures, with one reading made explicit: InvoiceId's nullability is an OR of two rules (null without an
invoice, not null with one) and the validator also reports each alternative on its own, so the alternative
that does not hold is listed as failed while the rule passes. Without invoice ids the one allowed "alternative"
is ``InvoiceId-C-005-C`` and the OR (``InvoiceId-C-003-C``) must pass; with every row on an invoice it is
``InvoiceId-C-004-C``. (A month with some rows on an invoice and some not is valid FOCUS, but this validator
checks each alternative over the whole file and then fails the OR too.)
"""

from __future__ import annotations

import csv
from datetime import date, datetime

import pytest

from reconcile.focus.columns import COLUMNS, FOCUS_COLUMNS
from reconcile.focus.corrections import Correction
from reconcile.focus.export import export_focus
from tests.reconcile.focus_archive import BOOK, CURRENCY, DEPLOYMENTS, FX, UTC, month_events, write_archive
from tests.reconcile.focus_validator_run import run_validator

INVOICE_ALTERNATIVE = "InvoiceId-C-005-C"


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    return write_archive(tmp_path_factory.mktemp("validator") / "archive", month_events())


def _check(report, alternative: str = INVOICE_ALTERNATIVE) -> None:
    assert report.passed, report.explain()
    assert [a.split(" ::")[0] for a in report.alternatives] == [alternative], report.alternatives
    assert {"InvoiceId-C-003-C", *({"InvoiceId-C-004-C", "InvoiceId-C-005-C"} - {alternative}),
            "SubAccountId-C-000-C", "SubAccountType-C-000-C",
            "SubAccountName-C-004-C", "BillingAccountId-C-000-M", "BillingAccountType-C-000-C",
            "Tags-C-000-C"} <= report.passes
    assert report.tests >= 500 and len(report.passes) >= 200


def test_csv_export_passes_focus_validator(archive, tmp_path):
    summary = export_focus(archive, "2026-11", BOOK, FX, tmp_path / "nov.csv", currency=CURRENCY)
    assert summary.rows > 500
    _check(run_validator(summary.path, tmp_path / "report.xml"))


def test_parquet_export_passes_focus_validator(archive, tmp_path):
    summary = export_focus(archive, "2026-11", BOOK, FX, tmp_path / "nov.parquet", currency=CURRENCY)
    _check(run_validator(summary.path, tmp_path / "report.xml"))


def test_month_with_correction_rows_passes_focus_validator(archive, tmp_path):
    fix = Correction(correction_id="rerate-7/1", recorded_at=datetime(2026, 12, 2, tzinfo=UTC),
                     charge_day=date(2026, 11, 4), deployment="azure-eu", provider="azure", account="sub-eu-7",
                     model="gpt-4o", region="westeurope", token_type="output", team="search", app="summaries",
                     key_id="fb-sea-1", alias="chat-default", tags={"project": "q4-launch"},
                     original_price_version=1, original_tokens=12_000, original_micro=10_119_720,
                     corrected_price_version=2, corrected_tokens=12_000, corrected_micro=8_905_354, requests=9,
                     attempts=9, project="sub-eu-7-prod")
    for name in ("dec.csv", "dec.parquet"):
        summary = export_focus(archive, "2026-12", BOOK, FX, tmp_path / name, [fix], currency=CURRENCY)
        assert summary.correction_rows == 2
        _check(run_validator(summary.path, tmp_path / f"{name}.xml"))


def test_a_month_whose_invoices_reconciliation_has_seen_carries_them_and_passes(archive, tmp_path):
    """Every account's November on one invoice (as AWS's and Azure's exports name it): InvoiceId on every row;
    the other alternative of the nullability OR ("null without an invoice") is then the one reported."""
    invoices = {(account, "2026-11"): f"INV-{account}-2026-11" for _, account, _, _ in DEPLOYMENTS.values()}
    summary = export_focus(archive, "2026-11", BOOK, FX, tmp_path / "nov.csv", currency=CURRENCY, invoices=invoices)
    with open(summary.path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["InvoiceId"] for r in rows} == set(invoices.values())
    assert all(r["InvoiceId"] == invoices[(r["BillingAccountId"], "2026-11")] for r in rows)
    _check(run_validator(summary.path, tmp_path / "report.xml"), "InvoiceId-C-004-C")


def test_every_column_is_focus_1_2_or_x_prefixed(archive, tmp_path):
    summary = export_focus(archive, "2026-11", BOOK, FX, tmp_path / "nov.csv", currency=CURRENCY)
    with open(summary.path, newline="") as f:
        header = next(csv.reader(f))
    assert header == list(COLUMNS)
    assert [c for c in header if c not in FOCUS_COLUMNS and not c.startswith("x_")] == []
