"""Parser for the provider simulator's usage export (``GET /v1/usage/export``), JSON or CSV.

JSON: ``{"object": "usage_export", "account", "date", "data": [row, ...]}``;
CSV: a header line then one line per row. A row is ``account``, ``date``
(``YYYY-MM-DD``, UTC), ``model``, ``requests`` and one count per token type.
The simulator already splits input the way farebox does (``input`` is
uncached), so its five types map one to one; any other count column (an
injected token type) is kept by its own name as an unpriced type. ``service_tier`` (optional text, ``batch`` for
a provider batch's lines) makes a group of its own, as the providers' reports grouped by tier do.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from datetime import date
from typing import Any

from reconcile.exports.rows import ExportParseError, UsageRow, UsageSums, arr, count, load_json, obj, text

_KEYS = ("account", "date", "model", "requests")
_TIER = "service_tier"


def parse_simulator_export(raw: bytes | str | Mapping[str, Any], provider: str = "simulator") -> list[UsageRow]:
    """Rows of a JSON export (bytes, str or parsed); ``provider`` names who the simulator stands in for."""
    page = obj(load_json(raw), "<export>")
    if page.get("object") != "usage_export":
        raise ExportParseError("object", f"must be 'usage_export', got {page.get('object')!r}")
    records = arr(page.get("data"), "data")
    return _rows([obj(r, f"data[{i}]") for i, r in enumerate(records)],
                 [f"data[{i}]" for i in range(len(records))], provider)


def parse_simulator_csv(raw: bytes | str, provider: str = "simulator") -> list[UsageRow]:
    """Rows of a CSV export; errors name the line (``line 3``, the header is line 1)."""
    if isinstance(raw, (bytes, bytearray)):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ExportParseError("<csv>", f"not UTF-8 ({exc})") from exc
    reader = csv.DictReader(io.StringIO(raw))
    missing = [k for k in _KEYS if k not in (reader.fieldnames or [])]
    if missing:
        raise ExportParseError("line 1", f"header lacks {', '.join(missing)}")
    records, places = [], []
    for record in reader:
        where = f"line {reader.line_num}"
        if None in record or None in record.values():
            raise ExportParseError(where, "has a different number of fields than the header")
        records.append({k: _csv_value(k, v, where) for k, v in record.items()})
        places.append(where)
    return _rows(records, places, provider)


def _csv_value(key: str, value: str, where: str) -> Any:
    if key in ("account", "date", "model"):
        return value
    if key == _TIER:
        return value or None
    if not value.isdigit():
        raise ExportParseError(f"{where}.{key}", f"must be a non-negative integer, got {value!r}")
    return int(value)


def _rows(records: Sequence[Mapping[str, Any]], places: Sequence[str], provider: str) -> list[UsageRow]:
    by_account: dict[str, UsageSums] = {}
    for record, where in zip(records, places):
        account = text(record, "account", where)
        model = text(record, "model", where)
        day = _day(record.get("date"), f"{where}.date")
        tier = record.get(_TIER)
        if tier is not None and (not isinstance(tier, str) or not tier):
            raise ExportParseError(f"{where}.{_TIER}", f"must be a non-empty string, got {tier!r}")
        sums = by_account.setdefault(account, UsageSums(provider, account))
        sums.add_requests(day, model, count(record, "requests", where), tier)
        for key in record:
            if key not in _KEYS and key != _TIER:
                sums.add(day, model, key, count(record, key, where), tier)
    return [row for account in sorted(by_account) for row in by_account[account].rows()]


def _day(value: Any, where: str) -> date:
    try:
        if isinstance(value, str) and len(value) == 10:
            return date.fromisoformat(value)
    except ValueError:
        pass
    raise ExportParseError(where, f"must be a date YYYY-MM-DD, got {value!r}")
