"""Re-rating's shell over the archive: which requests to re-price, read as values; the one service call.

``plan_rerate(archive_root, start, end, book, fx, version, now=...)`` is what
``farebox rerate`` and the admin API's re-rate endpoint call: it reads the
requests *admitted* on the UTC days [start, end] from the Parquet archive
(``streams.archive.read.read_archive``: each event id once), with their attempts,
their first close (by log position: a settlement the ledger charged, or an
expiry) and every ``rating.corrected`` archived for them since (read up to the
newest archived day, however late), and hands them to the pure
``reconcile.rerate.reprice.rerate``. A dry run shows ``Rerate.lines``; applying means
appending ``Rerate.corrections`` to the event log, which dedupes them by id.

``pending`` adds corrections already in the event log but not yet archived
(the embedded CLI passes the log's tail after the archiver's offset), so a
second apply before the archive catches up computes the same ids again
instead of a second, overlapping correction.

Bad input is a ``RerateError`` before anything is computed: an unknown price
version, ``start`` after ``end``, no archive, or no archived day in the range.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, datetime, timedelta
from pathlib import Path

import orjson
import pyarrow as pa

from ledger.codec import decode
from ledger.events import RatingCorrected
from ledger.usage import TOKEN_TYPES, TokenUsage
from pricing.book import FxTable, PriceBook
from pricing.errors import PricingError
from reconcile.rerate.reprice import ArchivedAttempt, ArchivedRequest, Rerate, RerateError, rerate
from streams.archive.read import ArchiveError, archive_files, read_archive

_COLUMNS = ["id", "type", "event_time", "log_partition", "log_offset", "request_id", "team", "attempt",
            "deployment", *(f"{kind}_tokens" for kind in TOKEN_TYPES), "usage_source", "cost_micro", "currency",
            "price_version", "scope_costs", "event"]


def usage_details(event: str | bytes | None) -> dict:
    """An attempt's one-hour cache writes and served tier: no columns of their own, read from its event (only
    when the event names them: most do not)."""
    text = event.decode() if isinstance(event, bytes) else event
    if not text or ("cache_write_1h" not in text and "service_tier" not in text):
        return {}
    usage = orjson.loads(text).get("usage") or {}
    if not isinstance(usage, dict):
        return {}
    out: dict = {}
    value = usage.get("cache_write_1h")
    if type(value) is int and value >= 0:
        out["cache_write_1h"] = value
    if isinstance(usage.get("service_tier"), str):
        out["service_tier"] = usage["service_tier"]
    return out


def event_project(event: str | bytes | None) -> str | None:
    """The project (sub-account) an attempt's event names, read only when it names one."""
    text = event.decode() if isinstance(event, bytes) else event
    if not text or '"project":"' not in text:
        return None
    project = orjson.loads(text).get("project")
    return project if isinstance(project, str) else None


def archived_days(root: Path) -> list[date]:
    """The event dates the archive has folders for, oldest first."""
    days = []
    for folder in root.glob("date=*"):
        try:
            days.append(date.fromisoformat(folder.name[len("date="):]))
        except ValueError:
            continue
    return sorted(days)


def load_requests(root: Path, start: date, end: date,
                  pending: Iterable[RatingCorrected] = ()) -> list[ArchivedRequest]:
    """The requests admitted on [start, end] (UTC) as the archive holds them (see the module docstring)."""
    days = archived_days(root)
    last = max(days[-1] if days else end, end + timedelta(days=1))  # a close or correction may come any day later
    try:
        table = read_archive(root, start, last, columns=_COLUMNS)
    except ArchiveError as exc:
        raise RerateError(str(exc)) from None
    rows = table.sort_by([("log_partition", "ascending"), ("log_offset", "ascending")]).to_pylist()
    admitted = {r["request_id"]: r for r in rows
                if r["type"] == "request.admitted" and start <= r["event_time"].date() <= end}
    attempts: dict[str, list[ArchivedAttempt]] = {}
    closes: dict[str, dict] = {}
    fixes: dict[str, dict[str, RatingCorrected]] = {}
    for r in rows:
        rid = r["request_id"]
        if rid not in admitted:
            continue
        kind = r["type"]
        if kind == "request.attempted":
            usage = TokenUsage(**{k: r[f"{k}_tokens"] or 0 for k in TOKEN_TYPES}, source=r["usage_source"],
                               **usage_details(r["event"]))
            attempts.setdefault(rid, []).append(ArchivedAttempt(r["attempt"], r["event_time"], r["deployment"],
                                                                usage, r["cost_micro"], r["price_version"]))
        elif kind in ("request.settled", "hold.expired"):
            closes.setdefault(rid, r)  # the first by log position is the one the ledger applied
        elif kind == "rating.corrected":
            event = decode(r["event"])
            assert isinstance(event, RatingCorrected)
            fixes.setdefault(rid, {})[event.id] = event
    for event in pending:
        if event.request_id in admitted:
            fixes.setdefault(event.request_id, {}).setdefault(event.id, event)
    out = []
    for rid, adm in admitted.items():
        close = closes.get(rid)
        settled = close is not None and close["type"] == "request.settled"
        out.append(ArchivedRequest(
            request_id=rid, team=adm["team"], admitted_at=adm["event_time"], currency=adm["currency"],
            attempts=tuple(sorted(attempts.get(rid, ()), key=lambda a: a.attempt)),
            settled_cost=close["cost_micro"] if settled else None,
            cost_by_scope={s["scope"]: s["micro"] for s in close["scope_costs"] or ()} if settled else {},
            corrections=tuple(fixes.get(rid, {}).values())))
    return out


def plan_rerate(archive_root: str | Path, start: date, end: date, book: PriceBook, fx: FxTable, version: int, *,
                now: datetime, pending: Iterable[RatingCorrected] = (), reason: str = "") -> Rerate:
    """Re-price the requests admitted on [start, end] under ``version``: corrections and the dry-run report."""
    try:
        book.get(version)
    except PricingError:
        known = ", ".join(str(v.version) for v in book.versions) or "none"
        raise RerateError(f"unknown price version {version}; the book has {known}", "price_version") from None
    if start > end:
        raise RerateError(f"--from {start} is after --to {end}")
    root = Path(archive_root)
    if not root.is_dir():
        raise RerateError(f"no archive at {root}: nothing has been archived there")
    if not archive_files(root, start, end):
        raise RerateError(f"the archive at {root} has no events dated {start}..{end} (UTC): nothing to re-rate")
    try:
        requests = load_requests(root, start, end, pending)
    except (pa.ArrowException, OSError) as exc:
        raise RerateError(f"cannot read the archive at {root}: {exc}") from None
    return rerate(requests, book, fx, version, now=now, reason=reason)
