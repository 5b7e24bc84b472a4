"""Query results as text: an aligned table for people, CSV and JSON for machines.

CSV and JSON keep every value exact: money stays integer micro-units (never a
float), dates and times become ISO strings, lists and maps JSON. The table
shows each ``*_micro`` column in currency units instead (``pricing.money``,
exact Decimal), under the name without the suffix, so a person reads 12.5
where the data says 12500000.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from pricing.money import to_decimal

if TYPE_CHECKING:  # render needs no DuckDB: the CLI's parser imports FORMATS from here
    from reconcile.warehouse import Result

FORMATS = ("table", "csv", "json")


def plain(value: Any) -> Any:
    """A JSON-able value: ISO dates and times, exact decimals as strings, nested values converted."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def _cell(value: Any) -> str:
    if value is None:
        return ""
    value = plain(value)
    return json.dumps(value, separators=(",", ":")) if isinstance(value, list | dict) else str(value)


def to_json(result: Result) -> str:
    return json.dumps([{k: plain(v) for k, v in row.items()} for row in result.dicts()], indent=2)


def to_csv(result: Result) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(result.columns)
    writer.writerows([_cell(v) for v in row] for row in result.rows)
    return out.getvalue()


def _display(columns: Sequence[str], row: Sequence[Any]) -> list[str]:
    """A row's cells for people: ``*_micro`` money in currency units."""
    return [str(to_decimal(v)) if name.endswith("_micro") and isinstance(v, int) and not isinstance(v, bool)
            else _cell(v) for name, v in zip(columns, row)]


def to_table(result: Result) -> str:
    if not result.columns:
        return ""
    names = [c.removesuffix("_micro") for c in result.columns]
    body = [_display(result.columns, row) for row in result.rows]
    widths = [max([len(n), *(len(r[i]) for r in body)]) for i, n in enumerate(names)]
    numeric = [all(_numeric(r[i]) for r in body) and bool(body) for i in range(len(names))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if num else c.ljust(w) for c, w, num in zip(cells, widths, numeric)).rstrip()

    out = [line(names), line(["-" * w for w in widths]), *(line(r) for r in body)]
    out.append(f"({len(body)} row{'s' if len(body) != 1 else ''})")
    return "\n".join(out) + "\n"


def _numeric(cell: str) -> bool:
    try:
        Decimal(cell)
    except ArithmeticError:
        return cell == ""
    return True


def render(result: Result, fmt: str) -> str:
    """``result`` as ``fmt`` (one of ``FORMATS``)."""
    if fmt == "json":
        return to_json(result) + "\n"
    if fmt == "csv":
        return to_csv(result)
    if fmt == "table":
        return to_table(result)
    raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
