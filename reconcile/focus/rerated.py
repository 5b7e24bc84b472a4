"""FOCUS corrections from the archived ``rating.corrected`` events: the event log is the system of record.

``archived_corrections(root, month, book, fx, currency)`` reads the
``rating.corrected`` events that can be billed in ``month`` (recorded in it,
or in the month before for a charge of that month) and turns each re-priced
attempt into one ``reconcile.focus.corrections.Correction`` per token type it
used, with the dimensions of its archived attempt (day, deployment, provider,
account, model, region) and admission (team, app, business unit, key, alias,
cost centre, tags).

Per token type amounts: the attempt's old and new costs (``old_attempt_costs``
and ``attempt_costs``, rounded up once per attempt by ``pricing.rating``) are
handed out to its token types exactly as ``reconcile.focus.usage`` hands out a
usage row's cost: each type gets the floor of its exact cost (tokens x unit
price of that side's version, the charge month's FX) and the micro-units the
rating rounded up go one each to the largest fractions (ties: ``TOKEN_TYPES``
order). So a correction's reversal rows undo the usage rows of the attempt to
the micro-unit, its corrected rows add up to the attempt's new cost, and for a
chain (v2 -> v3 -> v4) each correction reverses what the previous one billed.
Correction ids are ``{event id}/{attempt}/{token type}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import date, datetime, time, timedelta, timezone
from decimal import ROUND_FLOOR, Decimal, localcontext
from pathlib import Path

import duckdb

from ledger.codec import decode
from ledger.events import RatingCorrected
from ledger.usage import TOKEN_TYPES
from pricing.book import FxTable, PriceBook
from pricing.errors import PricingError
from reconcile.focus.columns import EXACT, FOCUS_TYPES, FocusError, month_bounds
from reconcile.focus.corrections import Correction
from reconcile.focus.usage import UnitPrice, unit_prices
from reconcile.rerate.archive import event_project, usage_details
from streams.archive.read import archive_files

_TOKENS = [f"{kind}_tokens" for kind in TOKEN_TYPES]


def allocate(cost: int, tokens: Sequence[int], prices: Sequence[Decimal]) -> list[int]:
    """``cost`` (the ceiling of sum(tokens x price)) handed out per token type (see the module docstring)."""
    with localcontext(EXACT):
        exact = [Decimal(t) * p for t, p in zip(tokens, prices)]
        floors = [int(x.to_integral_value(rounding=ROUND_FLOOR)) for x in exact]
        fractions = [x - f for x, f in zip(exact, floors)]
        total = sum(exact, Decimal(0))
    extra = cost - sum(floors)
    if not (total <= cost < total + 1) or extra < 0:
        raise FocusError(f"a corrected attempt costs {cost} micro-units but its price version gives {total}: "
                         "the book is not the one it was re-rated with")
    order = sorted(range(len(exact)), key=lambda i: (-fractions[i], i))
    out = list(floors)
    for i in order[:extra]:
        out[i] += 1
    return out


def _files_sql(files: Sequence[Path]) -> str:
    return "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in files) + "]"


def _rows(con: duckdb.DuckDBPyConnection, files: Sequence[Path], where: str, columns: str) -> list[dict]:
    if not files:
        return []
    cur = con.execute(f"SELECT {columns} FROM read_parquet({_files_sql(files)}, hive_partitioning = false) "
                      f"WHERE {where} QUALIFY row_number() OVER (PARTITION BY id ORDER BY log_partition, "
                      f"log_offset) = 1")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def archived_corrections(root: str | Path, month: date, book: PriceBook, fx: FxTable,
                         currency: str | None) -> list[Correction]:
    """The FOCUS corrections of the ``rating.corrected`` events that may bill in ``month``."""
    root = Path(root)
    start, end = month_bounds(month)
    since = month_bounds((month - timedelta(days=1)).replace(day=1))[0]
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        files = archive_files(root, since.date(), end.date())
        events = [decode(r["event"]) for r in _rows(
            con, files, f"type = 'rating.corrected' AND event_time >= '{since.isoformat()}'::TIMESTAMPTZ "
                        f"AND event_time < '{end.isoformat()}'::TIMESTAMPTZ", "event")]
        fixes = [e for e in events if isinstance(e, RatingCorrected)]
        if not fixes:
            return []
        first = min(f.admitted_at for f in fixes).date() - timedelta(days=1)
        last = max(f.admitted_at for f in fixes).date() + timedelta(days=2)
        ids = ", ".join("'" + f.request_id.replace("'", "''") + "'" for f in fixes)
        rows = _rows(con, archive_files(root, first, last),
                     f"type IN ('request.admitted', 'request.attempted') AND request_id IN ({ids})",
                     "type, request_id, attempt, event_time, team, app, business_unit, key_id, alias, cost_centre, "
                     "to_json(tags)::VARCHAR AS tags, deployment, provider, account, model, region, event, "
                     + ", ".join(_TOKENS))
    except duckdb.Error as exc:
        raise FocusError(f"cannot read the archive at {root}: {exc}") from None
    finally:
        con.close()
    admitted = {r["request_id"]: r for r in rows if r["type"] == "request.admitted"}
    attempts = {(r["request_id"], r["attempt"]): r for r in rows if r["type"] == "request.attempted"}
    out: list[Correction] = []
    for fix in sorted(fixes, key=lambda f: f.id):
        if currency is not None and fix.currency != currency:
            raise FocusError(f"correction {fix.id} is in {fix.currency}; the billing currency is {currency}")
        for n in sorted(fix.attempt_costs, key=int):
            attempt = attempts.get((fix.request_id, int(n)))
            if attempt is None:
                raise FocusError(f"correction {fix.id} re-prices attempt {n}, which is not in the archive at {root}")
            out += _attempt_corrections(fix, n, attempt, admitted.get(fix.request_id, {}), book, fx)
    return out


def _attempt_corrections(fix: RatingCorrected, n: str, attempt: Mapping, admission: Mapping, book: PriceBook,
                         fx: FxTable) -> list[Correction]:
    day: date = attempt["event_time"].astimezone(timezone.utc).date()
    at = datetime.combine(day.replace(day=1), time(), timezone.utc)
    deployment = attempt["deployment"]
    details = usage_details(attempt.get("event"))  # one-hour cache writes and served tier, where it names them
    keys = {v: _price_key(book, v, deployment, details.get("service_tier"))
            for v in (fix.old_price_version, fix.price_version)}
    prices: dict[tuple[int, str, str], UnitPrice] = unit_prices(book, fx, list(keys.items()), fix.currency, at)
    counts = {kind: attempt[f"{kind}_tokens"] or 0 for kind in TOKEN_TYPES}
    counts["cache_write_1h"] = details.get("cache_write_1h", 0)
    counts["cache_write"] -= counts["cache_write_1h"]
    tokens = [counts[kind] for kind in FOCUS_TYPES]
    sides = [allocate(cost, tokens, [prices[(version, keys[version], kind)].billing for kind in FOCUS_TYPES])
             for cost, version in ((fix.old_attempt_costs[n], fix.old_price_version),
                                   (fix.attempt_costs[n], fix.price_version))]
    tags_text = attempt.get("tags") or admission.get("tags")
    tags = tuple(sorted(json.loads(tags_text).items())) if tags_text and tags_text != "null" else ()
    return [Correction(
        correction_id=f"{fix.id}/{n}/{kind}", recorded_at=fix.time, charge_day=day, deployment=deployment,
        provider=attempt["provider"], account=attempt["account"], model=attempt["model"], region=attempt["region"],
        token_type=kind, team=fix.team, original_price_version=fix.old_price_version, original_tokens=tokens[i],
        original_micro=sides[0][i], corrected_price_version=fix.price_version, corrected_tokens=tokens[i],
        corrected_micro=sides[1][i], requests=1, attempts=1, app=admission.get("app"),
        business_unit=admission.get("business_unit"), key_id=admission.get("key_id"), alias=admission.get("alias"),
        cost_centre=attempt.get("cost_centre") or admission.get("cost_centre"), tags=tags, reason=fix.reason,
        project=event_project(attempt.get("event")))
        for i, kind in enumerate(FOCUS_TYPES) if tokens[i] > 0]


def _price_key(book: PriceBook, version: int, deployment: str, tier: str | None) -> str:
    """The price-book entry an attempt is priced at in ``version`` (``PriceVersion.served``'s choice)."""
    try:
        return book.get(version).served_key(deployment, tier)
    except PricingError:
        return deployment  # unit_prices names the missing version
