"""Re-rating: archived requests re-priced under another price version, as ``rating.corrected`` events.

Pure: requests come in as values (``ArchivedRequest``, built from the archive
by ``reconcile.rerate.archive``), the price book and FX table as values, and
``now`` is passed in. Each attempt is priced exactly as the gateway priced it
(``pricing.rating.rate``: exact Decimal, rounded up once per attempt; FX of
the attempt's time; an attempt with no tokens costs 0), so re-rating under a
request's own version gives exactly its recorded costs and no correction.

What a request costs now is the tip of its chain: its attempts' recorded
costs at their price version, or, once corrected, the latest correction's
``attempt_costs`` at its ``price_version``. A correction is made only where
the new attempt costs differ from the tip, relative to the tip, numbered
tip + 1 (``ledger.correction_events``); every scope the settlement charged
is charged the request's new total, as settlement does.

Only requests whose settlement the ledger charged are re-rated: a request
that expired (charged its full hold, with no usage behind it) or whose
archived attempts do not add up to its settled cost is reported as skipped,
never guessed at.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime

from ledger.events import RatingCorrected
from ledger.usage import TokenUsage
from pricing.book import FxTable, PriceBook, PriceVersion
from pricing.errors import PricingError
from pricing.rating import rate
from reconcile.errors import ReconcileError


class RerateError(ReconcileError):
    """Re-rating cannot be done as asked (unknown version, no archive, an unpriceable attempt); says why.

    ``field`` names the input at fault: ``price_version``, or ``from`` for the window of days."""

    def __init__(self, message: str, field: str = "from") -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True, slots=True)
class ArchivedAttempt:
    attempt: int
    time: datetime
    deployment: str
    usage: TokenUsage
    cost_micro: int
    price_version: int


@dataclass(frozen=True, slots=True)
class ArchivedRequest:
    """One request as the archive holds it: its admission, attempts, what settlement charged, its corrections."""

    request_id: str
    team: str
    admitted_at: datetime
    currency: str
    attempts: tuple[ArchivedAttempt, ...]
    settled_cost: int | None  # None: not settled (open, or expired before any settlement)
    cost_by_scope: Mapping[str, int] = field(default_factory=dict)
    corrections: tuple[RatingCorrected, ...] = ()


@dataclass(frozen=True, slots=True)
class DiffLine:
    """Re-rating's effect on one team x deployment x UTC day of attempts; money in micro-units."""

    team: str
    deployment: str
    day: date
    currency: str
    requests: int
    attempts: int
    old_micro: int
    new_micro: int

    @property
    def diff_micro(self) -> int:
        return self.new_micro - self.old_micro


@dataclass(frozen=True, slots=True)
class Rerate:
    """The corrections to append, the report per team/deployment/day, and the requests left alone (id, why)."""

    version: int
    corrections: list[RatingCorrected]
    lines: list[DiffLine]
    skipped: list[tuple[str, str]]
    requests: int  # requests considered

    @property
    def diff_micro(self) -> int:
        return sum(line.diff_micro for line in self.lines)


def _tip(request: ArchivedRequest) -> tuple[int, dict[str, int], int]:
    """(sequence, attempt costs by number, price version) of what the request costs now."""
    if request.corrections:
        last = max(request.corrections, key=lambda c: c.sequence)
        return last.sequence, dict(last.attempt_costs), last.price_version
    versions = {a.price_version for a in request.attempts}
    return 0, {str(a.attempt): a.cost_micro for a in request.attempts}, min(versions, default=0)


def _skip_reason(request: ArchivedRequest) -> str | None:
    if request.settled_cost is None:
        return "not settled (expired or still open): its charge is the hold, not usage"
    if not request.attempts:
        return "no attempt events in the archive"
    if len({a.price_version for a in request.attempts}) > 1:
        return "attempts priced at different versions"
    recorded = sum(a.cost_micro for a in request.attempts)
    if recorded != request.settled_cost:
        return f"its attempts add up to {recorded} micro-units but settlement charged {request.settled_cost}"
    sequences = sorted(c.sequence for c in request.corrections)
    if sequences != list(range(1, len(sequences) + 1)):
        return f"its corrections {sequences} are not a chain from 1 (one is missing from the archive)"
    return None


def price_attempt(attempt: ArchivedAttempt, version: PriceVersion, fx: FxTable, currency: str) -> int:
    """What the gateway would have charged for ``attempt`` under ``version`` (``proxy.metering.meter`` rules)."""
    usage = attempt.usage
    if not (usage.prompt_tokens or usage.completion_tokens):
        return 0
    try:
        price = version.served(attempt.deployment, attempt.usage.service_tier)
        return rate(usage, price, fx.rate(price.currency, currency, attempt.time))
    except PricingError as exc:
        raise RerateError(f"cannot price attempt {attempt.attempt} on deployment {attempt.deployment!r} at price "
                          f"version {version.version}: {exc}", "price_version") from None


def rerate(requests: Iterable[ArchivedRequest], book: PriceBook, fx: FxTable, version: int, *, now: datetime,
           reason: str = "") -> Rerate:
    """Re-price ``requests`` under ``version``; the corrections and the report (see the module docstring)."""
    try:
        target = book.get(version)
    except PricingError:
        known = ", ".join(str(v.version) for v in book.versions) or "none"
        raise RerateError(f"unknown price version {version}; the book has {known}", "price_version") from None
    why = reason or f"re-rated under price version {version}"
    corrections: list[RatingCorrected] = []
    skipped: list[tuple[str, str]] = []
    cells: dict[tuple[str, str, date, str], list[int]] = {}
    count = 0
    for request in sorted(requests, key=lambda r: r.request_id):
        count += 1
        problem = _skip_reason(request)
        if problem is not None:
            skipped.append((request.request_id, problem))
            continue
        sequence, old, old_version = _tip(request)
        new = {str(a.attempt): price_attempt(a, target, fx, request.currency) for a in request.attempts}
        if set(old) != set(new):
            skipped.append((request.request_id, "its last correction names other attempts than the archive"))
            continue
        for a in request.attempts:
            cell = cells.setdefault((request.team, a.deployment, a.time.date(), request.currency), [0, 0, 0, 0])
            cell[1] += 1
            cell[2] += old[str(a.attempt)]
            cell[3] += new[str(a.attempt)]
        for key in {(request.team, a.deployment, a.time.date(), request.currency) for a in request.attempts}:
            cells[key][0] += 1
        if new == old:
            continue
        old_total, new_total = sum(old.values()), sum(new.values())
        corrections.append(RatingCorrected(
            time=now, request_id=request.request_id, team=request.team, sequence=sequence + 1,
            admitted_at=request.admitted_at, currency=request.currency, old_price_version=old_version,
            price_version=version, old_cost_micro=old_total, cost_micro=new_total,
            old_cost_by_scope=dict.fromkeys(request.cost_by_scope, old_total),
            cost_by_scope=dict.fromkeys(request.cost_by_scope, new_total),
            old_attempt_costs=old, attempt_costs=new, reason=why))
    lines = [DiffLine(team, dep, day, ccy, *cell) for (team, dep, day, ccy), cell in sorted(cells.items())]
    return Rerate(version, corrections, lines, skipped, count)


# --- the report ------------------------------------------------------------------------------

REPORT_COLUMNS = ("day", "team", "deployment", "currency", "requests", "attempts", "old_micro", "new_micro",
                  "diff_micro")


def report_rows(result: Rerate) -> list[dict[str, object]]:
    """One row per team x deployment x day (``REPORT_COLUMNS``), money as integer micro-units."""
    return [{"day": line.day.isoformat(), "team": line.team, "deployment": line.deployment,
             "currency": line.currency, "requests": line.requests, "attempts": line.attempts,
             "old_micro": line.old_micro, "new_micro": line.new_micro, "diff_micro": line.diff_micro}
            for line in result.lines]


def report_json(result: Rerate, applied: bool) -> dict[str, object]:
    """The whole result as a JSON-able object (the admin API's response body): rows, totals, ids, skipped."""
    return {"price_version": result.version, "applied": applied, "requests": result.requests,
            "corrections": len(result.corrections), "diff_micro": result.diff_micro,
            "correction_ids": [c.id for c in result.corrections], "rows": report_rows(result),
            "skipped": [{"request_id": rid, "reason": why} for rid, why in result.skipped]}


def format_table(rows: Sequence[Mapping[str, object]]) -> str:
    """A fixed-width text table of ``report_rows``."""
    cells = [list(REPORT_COLUMNS)] + [[str(row[c]) for c in REPORT_COLUMNS] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(REPORT_COLUMNS))]
    numeric = {c for c in REPORT_COLUMNS if c in ("requests", "attempts", "old_micro", "new_micro", "diff_micro")}
    return "\n".join("  ".join(v.rjust(w) if REPORT_COLUMNS[i] in numeric else v.ljust(w)
                               for i, (v, w) in enumerate(zip(r, widths))).rstrip() for r in cells)
