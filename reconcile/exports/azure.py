"""Azure Cost Management exports (cost and usage details, CSV) for Azure OpenAI, from a local copy of the export's
storage folder.

An export writes CSV files (plain or gzipped) under its folder; each has a
header row. Column names differ between the enterprise and the customer
agreement schemas; this reads ``Date`` (``YYYY-MM-DD`` or ``MM/DD/YYYY``),
``MeterCategory``, ``MeterSubCategory``, ``MeterName``, ``Quantity``,
``UnitOfMeasure``, ``CostInBillingCurrency`` (``Cost`` in older schemas),
``BillingCurrency``/``BillingCurrencyCode``, ``ChargeType``, and, where present,
``InvoiceId``/``InvoiceNumber``.

* Only Azure OpenAI meters (``MeterCategory`` "Cognitive Services", a
  ``MeterSubCategory`` naming OpenAI) of ``ChargeType`` ``Usage`` are read.
* A meter name naming a token type (``billing_text.token_kind``: "gpt-4o-0806
  Inp glbl Tokens", "… cchd Inp …") is that model's tokens: ``Quantity`` in
  ``UnitOfMeasure`` (``1K``, ``1M``) times the unit; another meter (fine-tuning
  hours, hosting) is money of a type of its own (named by the meter), with no token count.
* Money is ``CostInBillingCurrency``, decimal text, exact; per invoice where the
  export names one.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from datetime import date, datetime
from pathlib import Path

from reconcile.exports.billing_text import (
    Models,
    Money,
    add_money,
    cost_rows,
    export_files,
    quantity,
    read_text,
    token_kind,
    unit_tokens,
    whole,
)
from reconcile.exports.rows import CostRow, ExportParseError, UsageRow, UsageSums

PROVIDER = "azure"
_REQUIRED = ("Date", "MeterCategory", "MeterSubCategory", "MeterName", "Quantity", "UnitOfMeasure")
_COST = ("CostInBillingCurrency", "Cost")
_CURRENCY = ("BillingCurrency", "BillingCurrencyCode", "Currency")
_INVOICE = ("InvoiceId", "InvoiceNumber")


def cost_export_files(root: Path) -> list[Path]:
    return export_files(root, ["**/*.csv", "**/*.csv.gz"])


def parse_cost_export(files: Iterable[Path], account: str, day: date, models: Models
                      ) -> tuple[list[UsageRow], list[CostRow]]:
    """Azure OpenAI token usage and money of ``day`` per model and token type (money also per invoice)."""
    sums = UsageSums(PROVIDER, account, ())
    money: Money = {}
    for path in files:
        reader = csv.DictReader(io.StringIO(read_text(path)))
        header = set(reader.fieldnames or ())
        missing = [c for c in _REQUIRED if c not in header]
        cost_col = next((c for c in _COST if c in header), None)
        currency_col = next((c for c in _CURRENCY if c in header), None)
        if missing or cost_col is None or currency_col is None:
            raise ExportParseError(path.name, "not an Azure cost export: no column "
                                   + ", ".join(missing + ([] if cost_col else ["CostInBillingCurrency"])
                                               + ([] if currency_col else ["BillingCurrency"])))
        invoice_col = next((c for c in _INVOICE if c in header), None)
        for n, row in enumerate(reader, 2):
            where = f"{path.name} line {n}"
            if row["MeterCategory"] != "Cognitive Services" or "openai" not in row["MeterSubCategory"].lower():
                continue
            if (row.get("ChargeType") or "Usage") != "Usage":
                continue
            if _day(row["Date"], f"{where}.Date") != day:
                continue
            meter = row["MeterName"].strip()
            kind = token_kind(meter)
            count = quantity(row["Quantity"], f"{where}.Quantity")
            tokens = None
            if kind is not None:
                model, token_type = models(kind[0]), kind[1]
                count *= unit_tokens(row["UnitOfMeasure"], f"{where}.UnitOfMeasure")
                tokens = whole(count, f"{where}.Quantity")
                sums.add(day, model, token_type, tokens)
            else:
                model, token_type = "*", meter  # hours, transactions: money of its own, no token count
            currency = row[currency_col].strip().upper()
            if not currency:
                raise ExportParseError(f"{where}.{currency_col}", "is empty")
            invoice = (row.get(invoice_col) or "").strip() or None if invoice_col else None
            add_money(money, (model, token_type, invoice, currency),
                      quantity(row[cost_col], f"{where}.{cost_col}", signed=True), tokens)
    return sums.rows(), cost_rows(PROVIDER, account, day, money, "invoice")




def _day(text: str, where: str) -> date:
    for fmt in ("%Y-%m-%d", "%m/%d/%Y"):
        try:
            return datetime.strptime(text.strip()[:10], fmt).date()
        except ValueError:
            continue
    raise ExportParseError(where, f"must be a date (YYYY-MM-DD or MM/DD/YYYY), got {text!r}")
