"""The finance bench's re-rating figure: the synthetic month re-priced in DuckDB (``reconcile.rerate.sql``).

Version 2 raises one deployment's output price by 10% (``CHANGED``); every
request admitted in the month is re-priced under it over the warehouse views,
opened fresh (the time counts opening it). Sanity, not timing, is checked: every request is accounted for
(re-rated or left alone with a reason), and only the changed deployment's
lines move (the others re-price to exactly what the month recorded).
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

from pricing.book import FxTable, PriceBook, PriceVersion
from reconcile.rerate.sql import rerate_lines
from reconcile.warehouse import Warehouse

CHANGED = "d-oai-mumbai"
WINDOW = (date(2026, 9, 30), date(2026, 10, 31))  # UTC days covering the Kolkata month 2026-10


def rerate_time(root: Path, book: PriceBook, fx: FxTable) -> dict[str, Any]:
    v1 = book.latest
    price = v1.price(CHANGED)
    v2 = PriceVersion(2, datetime(2026, 11, 1, tzinfo=timezone.utc),
                      {**v1.prices, CHANGED: replace(price, output=price.output * Decimal("1.1"))})
    started = time.perf_counter()
    with Warehouse(root) as wh:
        result = rerate_lines(wh, *WINDOW, v2, fx)
        seconds = time.perf_counter() - started
        admitted = wh.query("SELECT count(DISTINCT request_id) FROM archive_rows WHERE type = 'request.admitted' "
                            "AND CAST(timezone('UTC', event_time) AS DATE) BETWEEN $start AND $end",
                            {"start": WINDOW[0], "end": WINDOW[1]}).rows[0][0]
    moved = {line.deployment for line in result.lines if line.diff_micro}
    return {"seconds": round(seconds, 1), "requests": sum(result.counts.values()), "admitted": admitted,
            "attempts": sum(line.attempts for line in result.lines), "corrections": result.counts.get("correct", 0),
            "left_alone": {k: n for k, n in result.counts.items() if k not in ("ok", "correct")},
            "lines": len(result.lines), "diff_micro": result.diff_micro, "moved": sorted(moved)}
