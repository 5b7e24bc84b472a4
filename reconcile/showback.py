"""Showback and usage: who spent what, from the warehouse's ``requests`` and ``scope_balances`` views.

``showback(warehouse, month, by, budgets)`` is the monthly report (seed 002's
chargeback query is its shape): per group of ``by`` columns, over the requests
*admitted* in the budget month (calendar month in ``budgets.timezone``, as the
ledger charges them):

* ``requests`` admitted, ``closed`` (settled or expired), ``served`` (settled
  below 400), ``spend_micro`` (each request's cost: settled cost, or the hold
  an expiry charged in full, plus re-rating's corrections of it), ``corrected_micro``
  (those corrections' net sum), tokens by type;
* ``fallbacks`` and ``fallback_rate`` (of the served: after more than one
  attempt, or by a deployment other than the first tried);
* ``hedge_micro`` (the cost of attempts that lost a hedge race: part of the spend) and ``cache_saved_micro`` (what the
  requests answered from the response cache would have cost upstream; such a
  hit itself costs 0 and counts as served);
* ``fleet_micro``: the group's share of the month's fleet hours (deployments priced per GPU-hour,
  ``reconcile.fleet``: attributed by tokens served; not part of ``spend_micro``, which is what budgets were
  charged), and a row per deployment for its idle hours;
* ``reserved_micro``: provisioned capacity's flat charge (``reconcile.reserved``), a row per reserved deployment
  charged to the owning team, with ``reserved_hours``, ``used_hours`` and ``utilisation_pct``; the tokens it
  served are in the owner's rows at their marginal price (0 for a reservation paid in full);
* budget against actual, for the budget scope of the first scope-bearing
  column of ``by`` (team -> ``team:``, business_unit -> ``bu:``, key_id ->
  ``key:``): the ledger's settled and held in that month (``scope_balances``,
  what ``GET /admin/v1/budgets/{scope}`` reports), the limit the caller
  passes in, remaining, and state: unlimited, ok, soft (a threshold notice was
  archived, or settled + held reached soft_pct of the limit), exhausted.

Budgets come in as plain data from the composition root (``{scope:
{"limit_micro": int | None, "soft_pct": int}}``); reconcile never reads the
config database. ``usage`` is the same warehouse over a date range, for the
admin usage API's port.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa

from pricing.book import FxTable, PriceBook
from reconcile.dimensions import DIMENSIONS, USAGE_DIMENSIONS
from reconcile.fleet import attribute, fleet_hours, has_fleets, latest_event, month_window
from reconcile.reserved import has_reservations, reserved_hours, summary
from reconcile.warehouse import Result, Warehouse, WarehouseError


@dataclass(frozen=True, slots=True)
class Fleets:
    """What pricing the fleet hours needs: the price book, the FX table and the budget currency."""

    book: PriceBook
    fx: FxTable
    currency: str


BUDGET_SCOPES = (("team", "team:"), ("business_unit", "bu:"), ("key_id", "key:"))
LIMITS_SCHEMA = pa.schema([("scope", pa.string()), ("limit_micro", pa.int64()), ("soft_pct", pa.int64())])
_MONTH = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")

_TOTALS = """count(*) AS requests, count(*) FILTER (WHERE state <> 'open') AS closed,
       count(*) FILTER (WHERE served) AS served,
       sum(cost_micro + corrected_micro)::BIGINT AS spend_micro, sum(corrected_micro)::BIGINT AS corrected_micro,
       sum(input_tokens)::BIGINT AS input_tokens, sum(cached_input_tokens)::BIGINT AS cached_input_tokens,
       sum(cache_write_tokens)::BIGINT AS cache_write_tokens, sum(output_tokens)::BIGINT AS output_tokens,
       sum(reasoning_tokens)::BIGINT AS reasoning_tokens"""

_SHOWBACK = """
WITH fleet AS (
    {fleet}
), spend AS (
    SELECT {dims}, {totals},
           count(*) FILTER (WHERE fallback) AS fallbacks, sum(hedge_micro)::BIGINT AS hedge_micro,
           sum(cache_saved_micro)::BIGINT AS cache_saved_micro,
           coalesce(sum(f.fleet_micro), 0)::BIGINT AS fleet_micro, any_value(currency) AS currency
    FROM {requests} LEFT JOIN fleet AS f USING (request_id) WHERE month = $month GROUP BY {dims}
), notices AS (
    SELECT DISTINCT scope FROM archive_rows WHERE type = 'budget.threshold_crossed' AND period = $month
), budget AS (
    SELECT s.*, {scope} AS budget_scope FROM spend AS s
)
SELECT b.* EXCLUDE (budget_scope, currency),
       round(b.fallbacks / nullif(b.served, 0), 4) AS fallback_rate,
       b.budget_scope, l.limit_micro AS budget_limit_micro,
       coalesce(sb.settled_micro, 0) AS budget_settled_micro, coalesce(sb.held_micro, 0) AS budget_held_micro,
       l.limit_micro - coalesce(sb.settled_micro, 0) - coalesce(sb.held_micro, 0) AS budget_remaining_micro,
       CASE WHEN b.budget_scope IS NULL THEN NULL
            WHEN l.limit_micro IS NULL THEN 'unlimited'
            WHEN l.limit_micro - coalesce(sb.settled_micro, 0) - coalesce(sb.held_micro, 0) <= 0 THEN 'exhausted'
            WHEN n.scope IS NOT NULL
                 OR (coalesce(sb.settled_micro, 0) + coalesce(sb.held_micro, 0)) * 100 >= l.limit_micro * l.soft_pct
                 THEN 'soft'
            ELSE 'ok' END AS budget_state,
       b.currency
FROM budget AS b
LEFT JOIN scope_balances AS sb ON sb.scope = b.budget_scope AND sb.balance_period = $month
LEFT JOIN budget_limits AS l ON l.scope = b.budget_scope
LEFT JOIN notices AS n ON n.scope = b.budget_scope
ORDER BY b.spend_micro DESC, {order}
"""

FLEET_SHARES = "SELECT request_id, sum(fleet_micro)::BIGINT AS fleet_micro FROM fleet_shares GROUP BY request_id"
NO_FLEET = "SELECT NULL::VARCHAR AS request_id, NULL::BIGINT AS fleet_micro WHERE false"

_USAGE = """
SELECT {dims}, {totals}, count(*) FILTER (WHERE fallback) AS fallbacks, sum(hedge_micro)::BIGINT AS hedge_micro,
       any_value(currency) AS currency
FROM {requests} WHERE day BETWEEN $start AND $end GROUP BY {dims} ORDER BY {order}
"""


def requests_from(dims: Sequence[str]) -> str:
    """The relation grouped: ``requests``, with the served tier joined only when grouped by it."""
    if "service_tier" not in dims:
        return "requests"
    return ("(SELECT q.*, coalesce(t.service_tier, 'standard') AS service_tier FROM requests AS q "
            "LEFT JOIN request_tiers AS t USING (request_id)) AS tiered")


def parse_dimensions(raw: str | Sequence[str], allowed: Sequence[str] = DIMENSIONS) -> tuple[str, ...]:
    """The group-by columns named in ``raw`` ("team,app" or a list), checked; ``WarehouseError`` names an unknown
    one and lists the choices."""
    names = [n.strip() for n in (raw.split(",") if isinstance(raw, str) else raw) if n.strip()]
    if not names:
        raise WarehouseError(f"no columns to group by; choose from {', '.join(allowed)}")
    for name in names:
        if name not in allowed:
            raise WarehouseError(f"unknown group-by column {name!r}; choose from {', '.join(allowed)}")
    return tuple(dict.fromkeys(names))


def check_month(month: str) -> str:
    if not _MONTH.match(month):
        raise WarehouseError(f"month must look like YYYY-MM, got {month!r}")
    return month


def limits_table(budgets: Mapping[str, Mapping[str, Any]]) -> pa.Table:
    """The caller's budget limits as the ``budget_limits`` relation the showback query joins."""
    rows = [{"scope": scope, "limit_micro": spec.get("limit_micro"), "soft_pct": spec.get("soft_pct", 80)}
            for scope, spec in sorted(budgets.items())]
    return pa.Table.from_pylist(rows, schema=LIMITS_SCHEMA)


def budget_scope_sql(dims: Sequence[str]) -> str:
    """The SQL for a row's budget scope: the first of team, business_unit, key_id grouped by (else NULL)."""
    for column, prefix in BUDGET_SCOPES:
        if column in dims:
            return f"'{prefix}' || s.{column}"
    return "NULL::VARCHAR"


def showback(warehouse: Warehouse, month: str, by: Sequence[str] = ("team",),
             budgets: Mapping[str, Mapping[str, Any]] | None = None, fleets: Fleets | None = None) -> Result:
    """The month's showback rows, most spend first; ``WarehouseError`` when no request was admitted that month.
    With ``fleets`` (the price book, FX and budget currency), ``fleet_micro`` is each group's share of the
    month's fleet hours (``reconcile.fleet``), and a last row per deployment with idle hours carries their cost
    (every ``by`` column NULL but ``deployment``, when grouped by it)."""
    month = check_month(month)
    dims = parse_dimensions(by)
    warehouse.register("budget_limits", limits_table(budgets or {}))
    idle: list[dict[str, Any]] = []
    reserved: list[dict[str, Any]] = []
    fleet = NO_FLEET  # no fleet hours: the attempts are not read for them
    if fleets is not None and (has_fleets(fleets.book) or has_reservations(fleets.book)):
        start, end = month_window(month, warehouse.tz, latest_event(warehouse))
        hours = fleet_hours(fleets.book, fleets.fx, fleets.currency, start, end)
        if hours:
            idle = attribute(warehouse, hours).dicts()
            fleet = FLEET_SHARES
        reserved = summary(warehouse, reserved_hours(fleets.book, fleets.fx, fleets.currency, start, end))
    warehouse.pin_requests()  # spend and the ledger's balances from one reading of the archive
    try:
        sql = _SHOWBACK.format(dims=", ".join(dims), totals=_TOTALS, scope=budget_scope_sql(dims),
                               requests=requests_from(dims), fleet=fleet,
                               order=", ".join(f"b.{d} NULLS FIRST" for d in dims))
        result = warehouse.query(sql, {"month": month})
        held = warehouse.months() if not result.rows else []
    finally:
        warehouse.unpin_requests()
    if not result.rows:
        raise WarehouseError(
            f"no requests admitted in {month} (budget months in {warehouse.tz}) in the archive at {warehouse.root}; "
            f"it holds {', '.join(held) if held else 'no admissions at all'}")
    return with_reserved(with_idle(result, dims, idle), dims, reserved)


def with_idle(result: Result, dims: Sequence[str], idle: Sequence[Mapping[str, Any]]) -> Result:
    """``result`` plus a row per deployment's idle fleet hours: ``fleet_micro`` their cost, ``idle_hours`` how
    many (0 on every other row); the other figures 0 or NULL."""
    if not idle:
        return result
    return _with_rows(result, {"idle_hours": 0}, [
        ({"fleet_micro": e["idle_micro"], **_dims(dims, deployment=e["deployment"])}, {"idle_hours": e["idle_hours"]})
        for e in idle])


def with_reserved(result: Result, dims: Sequence[str], reserved: Sequence[Mapping[str, Any]]) -> Result:
    """``result`` plus a row per reserved deployment: its month's flat charge to the owning team
    (``reserved_micro``, with ``team`` when grouped by it and ``deployment`` when grouped by that), the hours
    reserved and used, and ``utilisation_pct`` (``reconcile.reserved``); those columns 0 or NULL elsewhere."""
    if not reserved:
        return result
    extra = {"reserved_micro": 0, "reserved_hours": 0, "used_hours": 0, "utilisation_pct": None}
    return _with_rows(result, extra, [(_dims(dims, team=e["team"], deployment=e["deployment"]),
                                       {c: e[c] for c in extra}) for e in reserved])


def _dims(dims: Sequence[str], **values: Any) -> dict[str, Any]:
    """The dimensions among ``values`` that the rows are grouped by."""
    return {k: v for k, v in values.items() if k in dims}


def _with_rows(result: Result, extra: Mapping[str, Any],
               added: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> Result:
    """``result`` with the columns ``extra`` (their values on its rows) and the rows ``added``: (the figures
    and dimensions they set, their ``extra`` values); every other figure 0, every other dimension NULL."""
    currency = result.dicts()[0].get("currency") if result.rows else None
    rows = [(*row, *extra.values()) for row in result.rows]
    for figures, extras in added:
        row: dict[str, Any] = dict.fromkeys(result.columns)
        row.update({c: 0 for c in result.columns if c.endswith(("_micro", "_tokens", "_hours"))
                    and not c.startswith("budget_")})
        row.update(requests=0, closed=0, served=0, fallbacks=0, currency=currency, **figures)
        rows.append((*(row[c] for c in result.columns), *(extras[c] for c in extra)))
    return Result((*result.columns, *extra), rows)


def usage_rows(warehouse: Warehouse, start: date, end: date, group_by: Sequence[str]) -> Result:
    """Requests, tokens and cost per group, over requests admitted on days [start, end] (budget zone)."""
    if end < start:
        raise WarehouseError(f"the range ends ({end}) before it starts ({start})")
    dims = parse_dimensions(group_by, USAGE_DIMENSIONS)
    sql = _USAGE.format(dims=", ".join(dims), totals=_TOTALS, order=", ".join(f"{d} NULLS FIRST" for d in dims),
                        requests=requests_from(dims))
    return warehouse.query(sql, {"start": start, "end": end})


def usage(root: str | Path, start: date, end: date, group_by: Sequence[str], *,
          tz: str = "Asia/Kolkata") -> list[dict[str, Any]]:
    """Usage rows (dicts) for ``GET /admin/v1/usage``: the archive at ``root``, days [start, end] inclusive in
    ``tz``, grouped by ``group_by`` (``USAGE_DIMENSIONS``). An empty range gives []; an empty or unreadable
    archive, an unknown column or a reversed range raise ``WarehouseError``."""
    with Warehouse(root, tz=tz) as warehouse:
        return usage_rows(warehouse, start, end, group_by).dicts()
