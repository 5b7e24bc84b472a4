"""The finance bench's reconciliation figure: one UTC day of the synthetic month against a provider export.

The provider's side is the simulator's usage export (``GET /v1/usage/export``:
``{"object": "usage_export", "data": [{account, date, model, requests, <type>: tokens, ...}]}``)
built straight from the day's attempted events in the archive, so it is exact:
reconciling it must flag 0 rows. A second copy with every count scaled by
``FACTOR`` (the simulator's ``export_factor``) must flag every compared token
row at about 3%. Not built by ``reconcile/sql/our_usage.sql``, so the check is
independent of the code it measures.

Timed, as ``farebox reconcile --date`` runs it after the fetch: parsing the
export (``reconcile.exports.parse_simulator_export``), reading and pricing our
side from the archive (``reconcile.daily.our_side``) and building the report
(``reconcile.report.build_report``). The simulator sends no cost report, so
only tokens are compared.
"""

from __future__ import annotations

import time
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import orjson

from pricing.book import FxTable, PriceBook
from reconcile.daily import our_side
from reconcile.drift import DEFAULT_THRESHOLD
from reconcile.exports import parse_simulator_export
from reconcile.report import build_report
from streams.archive.read import archive_files

DAY = date(2026, 10, 1)  # a whole UTC day of the month whenever it has 2 days or more (it starts 18:30 UTC)
FACTOR = Decimal("0.97")
TYPES = ("input", "cached_input", "cache_write", "output", "reasoning")
PROVIDER = "simulator"

_EXPORT_SQL = f"""
SELECT account, model, COUNT(DISTINCT request_id)::BIGINT AS requests,
       {", ".join(f"SUM({t}_tokens)::BIGINT AS {t}" for t in TYPES)}
FROM day_events
WHERE type = 'request.attempted' AND CAST(timezone('UTC', event_time) AS DATE) = $day
GROUP BY account, model ORDER BY account, model
"""


def provider_export(root: Path, day: date = DAY, factor: Decimal = Decimal(1)) -> bytes:
    """The simulator's JSON usage export of ``day``, every count times ``factor`` (rounded down)."""
    files = [str(p) for p in archive_files(root, day, day)]
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.register("day_events", con.read_parquet(files, union_by_name=True))
        cur = con.execute(_EXPORT_SQL, {"day": day})
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, r)) for r in cur.fetchall()]
    finally:
        con.close()
    data = [{**r, "date": day.isoformat(), **{t: int(r[t] * factor) for t in TYPES}} for r in rows]
    return orjson.dumps({"object": "usage_export", "account": None, "date": day.isoformat(), "data": data})


def reconcile_day(root: Path, export: bytes, book: PriceBook, fx: FxTable, day: date = DAY) -> dict[str, Any]:
    """Seconds to parse ``export``, read our side of ``day`` and build the report; rows compared and flagged."""
    started = time.perf_counter()
    usage = parse_simulator_export(export, PROVIDER)
    ours = our_side(root, day, book, fx, {})
    providers = {u.account: PROVIDER for u in usage}
    report = build_report(day, providers, usage, [], ours.usage, ours.money, threshold=DEFAULT_THRESHOLD,
                          unattributed_expired=ours.unattributed_expired,
                          current_price_version=ours.current_price_version)
    seconds = time.perf_counter() - started
    percents = [abs(r.percent) for r in report.flagged if r.percent is not None]
    return {"seconds": round(seconds, 2), "rows": len(report.rows), "flagged": len(report.flagged),
            "flagged_pct_min": round(float(min(percents)), 2) if percents else None,
            "flagged_pct_max": round(float(max(percents)), 2) if percents else None}


def reconcile_time(root: Path, book: PriceBook, fx: FxTable, day: date = DAY) -> dict[str, Any]:
    """One day reconciled against the exact export and against one scaled by ``FACTOR`` (one run each)."""
    exact = reconcile_day(root, provider_export(root, day), book, fx, day)
    scaled = reconcile_day(root, provider_export(root, day, FACTOR), book, fx, day)
    return {"day": day.isoformat(), "exact": exact, "scaled": {"factor": str(FACTOR), **scaled}}
