"""One day's reconciliation report: assembly of the drift rows, its content hash, its renderings.

Pure: the providers' rows and ours come in as values (``reconcile.daily``
fetches and reads them), the report and its ``reconcile.reported`` event come
out. Tokens are compared for every account; money only for accounts whose
provider sent a cost report (the simulator sends none), with our side priced
in the provider's currency.

Invariants:

* the report's content (day, accounts, threshold, rows) and so its
  :func:`content_hash` depend on the figures alone, never on when it ran, so
  re-running an unchanged day yields the same hash, the same event id and a
  byte-identical JSON file;
* a row's percent is ``(provider - ours) / provider x 100``; ``flagged`` is
  the comparison's verdict against ``threshold`` (``reconcile.drift``);
* :func:`exit_code` is 1 when any row is flagged, else 0.
"""

from __future__ import annotations

import csv
import hashlib
import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import date, datetime
from decimal import Decimal
from typing import Literal

import orjson

from ledger.reconcile_events import ReconcileReported
from reconcile.drift import DriftRow, OurUsage, compare_money, compare_tokens
from reconcile.exports.rows import CostRow, UsageRow

_HUNDRED = Decimal(100)

Format = Literal["table", "csv", "json"]
FORMATS: tuple[Format, ...] = ("table", "csv", "json")
CSV_COLUMNS = ("measure", "provider", "account", "day", "model", "token_type", "tier", "provider_figure", "ours",
               "difference", "percent", "flagged", "causes", "currency")


@dataclass(frozen=True, slots=True)
class Report:
    """The compared rows of ``day`` over ``accounts`` (sorted); ``providers`` names each account's provider."""

    day: date
    accounts: tuple[str, ...]
    providers: Mapping[str, str]
    threshold: Decimal
    rows: tuple[DriftRow, ...]

    @property
    def flagged(self) -> tuple[DriftRow, ...]:
        return tuple(r for r in self.rows if r.flagged)

    def content(self) -> dict[str, object]:
        """The JSON-safe content the hash covers: every figure, nothing about the run."""
        return {"day": self.day.isoformat(), "accounts": list(self.accounts),
                "providers": {a: self.providers[a] for a in self.accounts}, "threshold_pct": str(self.threshold),
                "rows": [r.to_dict() for r in self.rows]}


def build_report(day: date, providers: Mapping[str, str], usage: Iterable[UsageRow], costs: Iterable[CostRow],
                 ours: Iterable[OurUsage], ours_money: Iterable[OurUsage], *, threshold: Decimal,
                 unattributed_expired: Mapping[date, int] | None = None,
                 current_price_version: int | None = None) -> Report:
    """Token rows for every account in ``providers``; money rows for the accounts ``costs`` cover.

    ``ours`` is in the budget currency (only its tokens are read here);
    ``ours_money`` is the same usage priced in the provider's currency. Rows of
    days other than ``day`` are left out (a provider may return a wider range).
    """
    accounts = tuple(sorted(providers))
    usage = [u for u in usage if u.day == day and u.account in providers]
    costs = [c for c in costs if c.day == day and c.account in providers]
    ours = [o for o in ours if o.day == day and o.account in providers]
    expired = {day: (unattributed_expired or {}).get(day, 0)}
    rows = compare_tokens(usage, ours, threshold=threshold, accounts=accounts, unattributed_expired=expired)
    billed = {c.account for c in costs}
    if billed:
        money_ours = [o for o in ours_money if o.day == day and o.account in billed]
        rows += compare_money(costs, money_ours, threshold=threshold, accounts=sorted(billed),
                              current_price_version=current_price_version, unattributed_expired=expired)
    rows = [r if r.provider else replace(r, provider=providers[r.account]) for r in rows]  # rows only we have
    return Report(day, accounts, dict(providers), threshold, tuple(rows))


def content_hash(report: Report) -> str:
    """sha256 (hex) of the report's canonical JSON content."""
    return hashlib.sha256(orjson.dumps(report.content(), option=orjson.OPT_SORT_KEYS)).hexdigest()


def reported_event(report: Report, now: datetime) -> ReconcileReported:
    """The audit event of this report (its id is stable for unchanged figures)."""
    return ReconcileReported(time=now, day=report.day.isoformat(), accounts=",".join(report.accounts),
                             content_hash=content_hash(report), rows=len(report.rows),
                             flagged=len(report.flagged), threshold_percent=str(report.threshold))


def report_json(report: Report, event_id: str | None = None) -> bytes:
    """The report file: its content, the hash, the flagged count and the event that recorded it."""
    doc = {**report.content(), "content_hash": content_hash(report), "flagged": len(report.flagged),
           "event_id": event_id}
    return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n"


def drift_by_account(report: Report) -> dict[tuple[str, str, str], Decimal]:
    """The largest ``|provider - ours| / provider`` per (provider, account, measure) of the report.

    A row the provider reports nothing for while we do counts as 1 (all of ours
    is unmatched); every account compared appears, at 0 when its rows agree.
    The monitoring gauge ``farebox_reconcile_drift_ratio`` is this figure.
    """
    out: dict[tuple[str, str, str], Decimal] = {}
    for account in report.accounts:
        out[(report.providers[account], account, "tokens")] = Decimal(0)
    for row in report.rows:
        if row.percent is not None:
            ratio = abs(row.percent) / _HUNDRED
        else:
            ratio = Decimal(1) if row.ours else Decimal(0)
        key = (row.provider, row.account, row.measure)
        out[key] = max(out.get(key, Decimal(0)), ratio)
    return out


def exit_code(report: Report) -> int:
    return 1 if report.flagged else 0


def render(report: Report, fmt: Format, event_id: str | None = None) -> str:
    """The report for a terminal (``table``), a spreadsheet (``csv``) or a program (``json``: the file's text)."""
    if fmt == "json":
        return report_json(report, event_id).decode()
    lines = [_cells(r) for r in report.rows]
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(CSV_COLUMNS)
        writer.writerows([[line[c] for c in CSV_COLUMNS] for line in lines])
        return out.getvalue()
    return _table(report, lines)


def _causes(row: DriftRow) -> list[str]:
    return [f"{c.code}: {c.detail}" for c in row.causes]


def _cells(row: DriftRow) -> dict[str, str]:
    d = row.to_dict()
    causes = " | ".join(_causes(row))
    return {k: ("" if d[k] is None else str(d[k])) for k in CSV_COLUMNS if k != "causes"} | {
        "flagged": "yes" if row.flagged else "", "causes": causes}


_TABLE = (("measure", "measure"), ("account", "account"), ("model", "model"), ("token_type", "type"), ("tier", "tier"),
          ("provider_figure", "provider"), ("ours", "ours"), ("difference", "difference"), ("percent", "%"),
          ("flagged", "flagged"))


def _table(report: Report, lines: list[dict[str, str]]) -> str:
    head = [title for _, title in _TABLE]
    body = [[line[key] for key, _ in _TABLE] for line in lines]
    widths = [max(len(cell) for cell in column) for column in zip(head, *body)]
    fmt = "  ".join(f"{{:{'>' if i >= 4 else '<'}{w}}}" for i, w in enumerate(widths))
    out = [f"reconciliation {report.day.isoformat()}: {len(report.rows)} rows, {len(report.flagged)} flagged "
           f"beyond {report.threshold}% ({', '.join(report.accounts) or 'no accounts'})",
           fmt.format(*head)]
    for cells, row in zip(body, report.rows):
        out.append(fmt.format(*cells))
        out += [f"    cause {cause}" for cause in _causes(row)]
    return "\n".join(out) + "\n"
