"""Google Cloud Billing export rows (Vertex AI, the Gemini API), from a file exported from the BigQuery table.

The standard usage cost export table, exported as newline-delimited JSON
(``bq extract --destination_format NEWLINE_DELIMITED_JSON``, plain or gzipped;
one file or a folder of them). Each line one row with the documented fields, of
which this reads ``billing_account_id``, ``service.description``,
``sku.id``/``sku.description``, ``usage_start_time``, ``project.id``,
``cost``, ``currency``, ``usage.amount``/``usage.unit``,
``usage.amount_in_pricing_units``/``usage.pricing_unit``, ``credits[].amount``,
``cost_type`` and ``invoice.month``.

* Only the model services (``SERVICES``: "Vertex AI", "Gemini API", and its
  older name "Generative Language API") are read; only ``cost_type``
  ``regular`` rows (tax, adjustments and rounding are not model charges).
* A SKU whose description names a token type (``billing_text.token_kind``:
  "Gemini 2.5 Flash Input text token count") is that model's tokens, counted
  in ``usage.amount`` of ``usage.unit`` (a count, or thousands/millions of
  tokens); another SKU is money of a type of its own (its description), with no
  token count.
* Money is ``cost`` plus the row's ``credits`` (negative amounts: free tier,
  committed use, promotions), the net the account pays. BigQuery keeps ``cost``
  as FLOAT64; the export writes its shortest decimal text, which is read as
  that decimal, never through a binary float.
* The day is ``usage_start_time``'s UTC date.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

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
    utc_time,
    whole,
)
from reconcile.exports.rows import CostRow, ExportParseError, UsageRow, UsageSums

PROVIDER = "google"
SERVICES = ("Vertex AI", "Gemini API", "Generative Language API")


def billing_files(root: Path) -> list[Path]:
    """The export's files: ``root`` itself, or every ``*.json``/``*.jsonl``/``*.ndjson`` (gzipped or not) under it."""
    return export_files(root, ["**/*.json", "**/*.jsonl", "**/*.ndjson", "**/*.json.gz", "**/*.jsonl.gz",
                               "**/*.ndjson.gz"])


def parse_billing_export(files: Iterable[Path], account: str, day: date, models: Models
                         ) -> tuple[list[UsageRow], list[CostRow]]:
    """Token usage and net money of ``day`` per model and token type (money also per invoice month)."""
    sums = UsageSums(PROVIDER, account, ())
    money: Money = {}
    for path in files:
        for n, line in enumerate(read_text(path).splitlines(), 1):
            if not line.strip():
                continue
            where = f"{path.name} line {n}"
            try:
                row = json.loads(line, parse_float=Decimal, parse_int=Decimal)
            except ValueError as exc:
                raise ExportParseError(where, f"not JSON ({exc})") from None
            if not isinstance(row, dict):
                raise ExportParseError(where, "not a billing export row (a JSON object)")
            if _field(row, "service", "description", where) not in SERVICES:
                continue
            if (row.get("cost_type") or "regular") != "regular":
                continue
            if utc_time(row.get("usage_start_time"), f"{where}.usage_start_time", naive_is_utc=True).date() != day:
                continue
            sku = _field(row, "sku", "description", where)
            usage = row.get("usage") or {}
            if not isinstance(usage, dict):
                raise ExportParseError(f"{where}.usage", "must be an object")
            kind = token_kind(sku)
            tokens = None
            if kind is not None:
                model, token_type = models(kind[0]), kind[1]
                count = quantity(usage.get("amount"), f"{where}.usage.amount") * unit_tokens(usage.get("unit"),
                                                                                             f"{where}.usage.unit")
                tokens = whole(count, f"{where}.usage")
                sums.add(day, model, token_type, tokens)
            else:
                model, token_type = "*", sku  # searches, grounding, hosting: money of its own, no token count
            cost = quantity(row.get("cost"), f"{where}.cost", signed=True)
            for c, credit in enumerate(row.get("credits") or ()):
                cost += quantity((credit or {}).get("amount"), f"{where}.credits[{c}].amount", signed=True)
            currency = row.get("currency")
            if not isinstance(currency, str) or not currency.strip():
                raise ExportParseError(f"{where}.currency", f"must be a currency code, got {currency!r}")
            invoice = (row.get("invoice") or {}).get("month") if isinstance(row.get("invoice"), dict) else None
            add_money(money, (model, token_type, str(invoice) if invoice else None, currency.strip().upper()), cost,
                      tokens)
    return sums.rows(), cost_rows(PROVIDER, account, day, money, "invoice month")


def _field(row: dict[str, Any], record: str, name: str, where: str) -> str:
    value = row.get(record)
    text = value.get(name) if isinstance(value, dict) else None
    if not isinstance(text, str):
        raise ExportParseError(f"{where}.{record}.{name}", f"must be a string, got {text!r}")
    return text
