"""Usage for the admin usage API and the FinOps page: showback's usage rows plus latency and cache figures.

``usage_report(root, start, end, by, tz)`` opens the warehouse once and
returns, for requests admitted on days [start, end] of ``tz``:

* per group of ``by``: the columns of ``showback.usage_rows`` (requests,
  tokens by type, ``spend_micro``, fallbacks, currency; showback owns their
  definitions), then ``ttft_p50_ms``/``ttft_p95_ms`` (the TTFT of the attempt
  that served), ``latency_p50_ms``/``latency_p95_ms``, ``cache_hits`` and
  ``cache_saved_micro``, from the ``requests`` view;
* ``totals``: every additive column of those rows summed by DuckDB, and the
  percentiles over the whole range (a percentile of percentiles is not one).

``budget_events`` lists budget threshold crossings and money refusals, most
recent first. An empty archive answers no rows (with the same columns) rather
than an error: a range with no data is not a fault. Money is integer
micro-units; nothing here is a float but the fallback ratio callers derive.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa

from reconcile.showback import USAGE_DIMENSIONS, parse_dimensions, requests_from, usage_rows
from reconcile.warehouse import Warehouse, WarehouseError, archive_files

SHOWBACK_USAGE_COLUMNS = ("requests", "closed", "served", "spend_micro", "corrected_micro", "input_tokens", "cached_input_tokens",
                          "cache_write_tokens", "output_tokens", "reasoning_tokens", "fallbacks", "hedge_micro",
                          "currency")
"""What ``showback.usage_rows`` answers after the group columns (the header of an empty archive's answer; a test
keeps it equal to what the function returns)."""

STATS_COLUMNS = ("ttft_p50_ms", "ttft_p95_ms", "latency_p50_ms", "latency_p95_ms", "cache_hits", "cache_saved_micro")
NOT_ADDITIVE = frozenset({"currency", *STATS_COLUMNS[:4]})

EVENT_COLUMNS = ("at", "type", "scope", "period", "team", "app", "key_id", "error_code", "threshold_pct",
                 "spent_micro", "limit_micro")

_STATS = """
SELECT {dims}, grouping({first}) AS whole_range,
       quantile_disc(ttft_ms, 0.5) AS ttft_p50_ms, quantile_disc(ttft_ms, 0.95) AS ttft_p95_ms,
       quantile_disc(latency_ms, 0.5) AS latency_p50_ms, quantile_disc(latency_ms, 0.95) AS latency_p95_ms,
       count(*) FILTER (WHERE cache_hit) AS cache_hits, sum(cache_saved_micro)::BIGINT AS cache_saved_micro
FROM {requests} WHERE day BETWEEN $start AND $end
GROUP BY GROUPING SETS (({dims}), ())
"""

_EVENTS = """
SELECT event_time AS at, type, scope, period, team, app, key_id, error_code,
       try_cast(json_extract_string(event, '$.threshold_pct') AS INTEGER) AS threshold_pct,
       try_cast(json_extract_string(event, '$.spent_micro') AS BIGINT) AS spent_micro,
       try_cast(json_extract_string(event, '$.limit_micro') AS BIGINT) AS limit_micro
FROM events
WHERE type IN ('budget.threshold_crossed', 'request.refused')
  AND CAST(timezone(getvariable('budget_tz'), event_time) AS DATE) BETWEEN $start AND $end
ORDER BY event_time DESC, id
LIMIT $limit
"""


@dataclass(frozen=True, slots=True)
class UsageReport:
    """Column names in order, one dict per group, and the range's totals (None when there is no row)."""

    columns: tuple[str, ...]
    rows: list[dict[str, Any]]
    totals: dict[str, Any] | None
    warnings: tuple[str, ...] = ()  # archive files left out of every view (``streams.archive.vouch``)


def _totals(warehouse: Warehouse, rows: list[dict[str, Any]], columns: Sequence[str],
            dims: Sequence[str]) -> dict[str, Any]:
    """DuckDB sums every additive column of the usage rows (exact integers)."""
    additive = [c for c in columns if c not in dims and c not in NOT_ADDITIVE]
    warehouse.register("usage_groups", pa.Table.from_pylist(rows))
    sums = ", ".join(f'sum("{c}")::BIGINT AS "{c}"' for c in additive)
    result = warehouse.query(f"SELECT {sums}, any_value(currency) AS currency FROM usage_groups")
    return result.dicts()[0]


def usage_report(root: str | Path, start: date, end: date, by: Sequence[str], *, tz: str) -> UsageReport:
    """Usage per group of ``by`` over days [start, end] of ``tz``; ``WarehouseError`` for an unreadable archive,
    an unknown column or a reversed range."""
    dims = parse_dimensions(by, USAGE_DIMENSIONS)
    columns = (*dims, *SHOWBACK_USAGE_COLUMNS, *STATS_COLUMNS)
    if end < start:
        raise WarehouseError(f"the range ends ({end}) before it starts ({start})")
    if not archive_files(root):
        return UsageReport(columns, [], None)
    with Warehouse(root, tz=tz) as warehouse:
        base = usage_rows(warehouse, start, end, dims)
        if not base.rows:
            return UsageReport((*base.columns, *STATS_COLUMNS), [], None, warehouse.warnings)
        stats = warehouse.query(_STATS.format(dims=", ".join(dims), first=dims[0], requests=requests_from(dims)),
                                {"start": start, "end": end})
        by_group: dict[tuple[Any, ...], dict[str, Any]] = {}
        whole: dict[str, Any] = {}
        for row in stats.dicts():
            figures = {c: row[c] for c in STATS_COLUMNS}
            if row["whole_range"]:
                whole = figures
            else:
                by_group[tuple(row[d] for d in dims)] = figures
        rows = [{**row, **by_group[tuple(row[d] for d in dims)]} for row in base.dicts()]
        totals = {**_totals(warehouse, base.dicts(), base.columns, dims), **whole}
        return UsageReport((*base.columns, *STATS_COLUMNS), rows, totals, warehouse.warnings)


def budget_events(root: str | Path, start: date, end: date, *, tz: str, limit: int = 50) -> UsageReport:
    """Budget threshold crossings and money refusals on days [start, end] of ``tz``, most recent first."""
    if end < start:
        raise WarehouseError(f"the range ends ({end}) before it starts ({start})")
    if not archive_files(root):
        return UsageReport(EVENT_COLUMNS, [], None)
    with Warehouse(root, tz=tz) as warehouse:
        result = warehouse.query(_EVENTS, {"start": start, "end": end, "limit": limit})
        return UsageReport(result.columns, result.dicts(), None, warehouse.warnings)
