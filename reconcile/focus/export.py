"""FOCUS 1.2 export of one month: ``export_focus(archive_root, month, book, fx, out, corrections=())``.

One row per UTC day x deployment x token type x price version x team/app/key/
alias/cost centre/tags (``reconcile.focus.usage``), so tokens are real
quantities (ConsumedQuantity in ``Tokens``, PricingQuantity in
``1000000 Tokens``), plus two rows per correction billed in the month
(``reconcile.focus.corrections``). Columns: ``reconcile.focus.columns``.

Provider usage is exported from ``request.attempted`` events, which carry
tokens and what the provider bills; fleets paid by the hour add the month's
fleet hours, attributed by tokens served (``reconcile.focus.fleet_lines``), and provisioned capacity its
reservation's recurring purchase and used/unused rows (``reconcile.focus.reserved_lines``). A ``hold.expired`` charge (a pod died before
settling) is a budget charge with no usage behind it, so it is not a FOCUS row.

Windows: the month is the half-open UTC interval [first day 00:00, first day of
the next month 00:00) on each attempt's ``event_time``, so adjacent months never
share an event, and a day's rows are built once from its events, never
incrementally updated (no hourly window over daily rows can count a day twice).

Money and rounding. BilledCost and EffectiveCost are the ledger's micro-units:
each attempt's ``cost_micro`` (rounded up once per attempt by
``pricing.rating``) handed out to its token types, each type within one
micro-unit of its own tokens x its own unit price (``reconcile.focus.usage``).
So the month's BilledCost (usage rows) equals the ledger's attempt costs
exactly; ``ExportSummary.rounding_micro`` reports how far that total is above
the exact, unrounded price of the same tokens (the ledger's rounding: in
[0, attempts) micro-units), which is also BilledCost - ListCost over the usage
rows, since ListCost is ListUnitPrice x PricingQuantity unrounded.

Determinism: rows are in a total order (``ChargeLine.sort_key``), no value
comes from the clock, Parquet decimal scales depend only on the values; the
same archive, book, FX and corrections give a byte-identical file. The file is
written to a temporary name and renamed: an export that fails writes nothing.

Empty months are an error (``FocusError``): a month with no billable usage and
no corrections is almost always a wrong ``--month`` or archive path, so it gets
a message rather than a header-only file.
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from pricing.book import FxTable, PriceBook
from reconcile.focus.columns import (
    COLUMNS,
    DATETIME_COLUMNS,
    DECIMAL_COLUMNS,
    INTEGER_COLUMNS,
    ChargeLine,
    FocusError,
    csv_value,
    focus_row,
    month_bounds,
    scale_of,
)
from reconcile.focus.corrections import Correction, correction_lines, priced_versions, unique
from reconcile.focus.fleet_lines import fleet_lines, fleet_row
from reconcile.focus.reserved_lines import reserved_lines, reserved_row
from reconcile.focus.usage import UnitPrice, read_usage, unit_prices
from streams.archive.read import ArchiveError, archive_files
from streams.archive.schema import ARCHIVE_SCHEMA_VERSION, schema_version_of

__all__ = ["ExportSummary", "FocusError", "export_focus", "parse_month"]

_MONTH = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")


@dataclass(frozen=True, slots=True)
class ExportSummary:
    """What was written and how it reconciles with the ledger (micro-units of ``currency``)."""

    month: str
    path: Path
    currency: str
    rows: int
    usage_rows: int
    correction_rows: int
    attempts: int  # attempt events of the month read from the archive
    ledger_micro: int  # their cost_micro, summed: what the ledger charged
    billed_micro: int  # BilledCost of the usage rows, in micro-units: equal to ledger_micro
    exact_micro: Decimal  # the same tokens priced exactly, unrounded
    correction_micro: int  # net BilledCost of the correction rows
    fleet_rows: int = 0  # rows of fleets paid by the hour (``reconcile.focus.fleet_lines``)
    fleet_micro: int = 0  # their BilledCost: what the month's fleet hours cost
    reserved_rows: int = 0  # rows of provisioned capacity (``reconcile.focus.reserved_lines``)
    reserved_micro: int = 0  # their BilledCost (the purchases): what the month's reserved hours cost

    @property
    def rounding_micro(self) -> Decimal:
        """The ledger's per-attempt rounding up over the month: ledger - exact, in [0, attempts)."""
        return self.ledger_micro - self.exact_micro

    def describe(self) -> str:
        return (f"FOCUS {self.month} -> {self.path}: {self.rows} rows ({self.usage_rows} usage, "
                f"{self.correction_rows} correction), {self.attempts} attempts; BilledCost {self.billed_micro} "
                f"micro-{self.currency} = ledger {self.ledger_micro}; ledger rounding over exact prices "
                f"{self.rounding_micro} micro-units; corrections net {self.correction_micro}"
                + (f"; fleet hours {self.fleet_micro} in {self.fleet_rows} rows" if self.fleet_rows else "")
                + (f"; reserved hours {self.reserved_micro} in {self.reserved_rows} rows" if self.reserved_rows else ""))


def parse_month(month: str) -> date:
    """``YYYY-MM`` -> the month's first day; anything else is a FocusError saying the format."""
    match = _MONTH.match(month) if isinstance(month, str) else None
    if match is None:
        raise FocusError(f"month must look like YYYY-MM (e.g. 2026-11), got {month!r}")
    return date(int(match[1]), int(match[2]), 1)


def _archive_files(root: Path, first: date, last: date) -> list[Path]:
    """The archive's files for event dates [first, last], each checked to be of the schema this build reads."""
    files = archive_files(root, first, last)
    for path in files:
        try:
            version = schema_version_of(pq.read_schema(path).metadata)
        except (pa.ArrowException, OSError) as exc:
            raise FocusError(f"{path}: not a readable archive file ({exc})") from None
        if version != ARCHIVE_SCHEMA_VERSION:
            newer = version > ARCHIVE_SCHEMA_VERSION
            raise FocusError(f"{path}: archive schema {version} is {'newer' if newer else 'older'} than the "
                             f"{ARCHIVE_SCHEMA_VERSION} the FOCUS export reads"
                             + ("; upgrade farebox to read it" if newer else "; it has no typed token columns"))
    return files


def _correction_prices(corrections: Sequence[Correction], first: date, book: PriceBook, fx: FxTable,
                       currency: str) -> dict[tuple[int, str, str], UnitPrice]:
    """Unit prices for the month's corrections: each at its own price version and its charge month's FX."""
    prices: dict[tuple[int, str, str], UnitPrice] = {}
    for charge_month, pairs in priced_versions(corrections, first).items():
        at = datetime.combine(charge_month, time(), timezone.utc)
        prices.update(unit_prices(book, fx, pairs, currency, at))
    return prices


def export_focus(archive_root: str | Path, month: str, book: PriceBook, fx: FxTable, out: str | Path,
                 corrections: Iterable[Correction] = (), *, currency: str | None = None,
                 invoices: Mapping[tuple[str, str], str] | None = None) -> ExportSummary:
    """Write the FOCUS file of ``month`` (UTC) to ``out`` (``.csv`` or ``.parquet``); see the module docstring.

    ``currency`` is the billing currency (the budget currency the ledger charges in); when given, the
    archived attempts must be in it. Raises FocusError with a clear message, writing nothing."""
    first = parse_month(month)
    out = Path(out)
    if out.suffix not in (".csv", ".parquet"):
        raise FocusError(f"--out must end in .csv or .parquet, got {out.name!r}")
    root = Path(archive_root)
    if not root.is_dir():
        raise FocusError(f"no archive at {root}: nothing has been archived there")
    start, end = month_bounds(first)
    last = end.date() - timedelta(days=1)
    try:
        usage = read_usage(_archive_files(root, first - timedelta(days=1), last), start, end, book, fx, currency)
    except ArchiveError as exc:
        raise FocusError(str(exc)) from None
    except duckdb.Error as exc:
        raise FocusError(f"cannot read the archive at {root}: {exc}") from None
    billing = usage.currency or currency
    fixes = [c for c in unique(corrections) if c.billing_month == first]
    if billing is None:
        if fixes:
            raise FocusError(f"{month} has corrections but no usage to take the billing currency from; pass it")
        billing = ""
    fix_lines = correction_lines(fixes, first, _correction_prices(fixes, first, book, fx, billing))
    billed = sum(line.billed_micro for line in usage.lines)
    if billed != usage.ledger_micro:  # the allocation's invariant; a failure is a bug, never a rounding
        raise FocusError(f"internal: usage rows bill {billed} micro-units but the ledger charged {usage.ledger_micro}")
    fleet = fleet_lines(root, first, book, fx, billing) if billing else []
    reserved = reserved_lines(root, first, book, fx, billing) if billing else []
    if not usage.lines and not fix_lines and not fleet and not reserved:
        raise FocusError(f"no usage to export for {month}: {usage.attempts} attempt event(s) dated "
                         f"{first}..{last} (UTC) in {root}, none with tokens, and no corrections billed in "
                         f"{month}; check --month and the archive path")
    lines = sorted(usage.lines + fix_lines, key=ChargeLine.sort_key)
    rows = [focus_row(line, billing, (invoices or {}).get((line.account, f"{line.billing_month:%Y-%m}")))
            for line in lines]
    rows += [fleet_row(line, billing, (invoices or {}).get((line.account, month))) for line in fleet]
    rows += [reserved_row(line, billing, (invoices or {}).get((line.account, month))) for line in reserved]
    _write_atomic(out, _parquet(rows) if out.suffix == ".parquet" else _csv(rows))
    return ExportSummary(
        month=month, path=out, currency=billing, rows=len(rows), usage_rows=len(usage.lines),
        correction_rows=len(fix_lines), attempts=usage.attempts, ledger_micro=usage.ledger_micro,
        billed_micro=billed, exact_micro=usage.exact_micro,
        correction_micro=sum(line.billed_micro for line in fix_lines), fleet_rows=len(fleet),
        fleet_micro=sum(line.billed_micro for line in fleet), reserved_rows=len(reserved),
        reserved_micro=sum(line.micro for line in reserved if line.status == "purchase"))


def _csv(rows: list[dict]) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in rows:
        writer.writerow([csv_value(column, row[column]) for column in COLUMNS])
    return buffer.getvalue().encode()


def _parquet(rows: list[dict]) -> bytes:
    values = {column: [row[column] for row in rows] for column in COLUMNS}
    fields = []
    for column in COLUMNS:
        if column in DECIMAL_COLUMNS:
            kind = pa.decimal128(38, scale_of(values, column))
        elif column in INTEGER_COLUMNS:
            kind = pa.int64()
        elif column in DATETIME_COLUMNS:
            kind = pa.timestamp("ms", tz="UTC")  # Parquet has no second unit
        else:
            kind = pa.string()
        fields.append(pa.field(column, kind))
    schema = pa.schema(fields, metadata={b"focus_version": b"1.2"})
    table = pa.table([pa.array(values[f.name], type=f.type) for f in fields], schema=schema)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
