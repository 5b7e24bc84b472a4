"""Fleets paid by the hour (self-hosted GPUs: ``Price.gpu_hour`` x ``gpus``): the flat cost of each hour,
attributed to the attempts the fleet served in it by their tokens.

* **The hours.** ``fleet_hours`` lists, for a window, every hour in which the price version in force at the
  hour's start gives a deployment an hourly price, with that hour's cost in the budget currency (the month's FX
  rate; rounded half-even to a micro-unit once per hour, so the hours add up to what the window costs). Hours
  start on the hour in the zone asked for (the budget zone for showback, UTC for FOCUS).
* **The shares.** An hour's cost is split over the attempts on that deployment whose event time falls in the
  hour, in proportion to their tokens (every type: input, cached input, cache writes, output, reasoning), by
  largest remainder (ties by request id, then attempt): whole micro-units that add up to the hour's cost
  exactly. A request carries the shares of its attempts (``fleet_micro``), so every dimension showback groups
  by sees them; a request admitted in the last seconds of a month may carry a share of the next month's first
  hour.
* **Idle.** An hour in which the fleet served no token is nobody's request: its cost is reported as idle,
  per deployment, never spread over other hours.

The gateway never holds or charges this cost (budgets see the token prices, the fleet's marginal cost); the
finance side reports it beside the spend. Pure but for the warehouse query.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import ROUND_HALF_EVEN, Decimal
from zoneinfo import ZoneInfo

import pyarrow as pa

from pricing.book import FxTable, Price, PriceBook
from pricing.errors import NoPriceInForce
from reconcile.warehouse import Result, Warehouse

HOUR = timedelta(hours=1)
HOURS_SCHEMA = pa.schema([("deployment", pa.string()), ("hour_start", pa.timestamp("us", tz="UTC")),
                          ("hour_end", pa.timestamp("us", tz="UTC")), ("cost_micro", pa.int64()),
                          ("gpu_hour", pa.string()), ("gpus", pa.int64()), ("currency", pa.string()),
                          ("price_version", pa.int64())])


@dataclass(frozen=True, slots=True)
class FleetHour:
    deployment: str
    start: datetime  # UTC
    cost_micro: int  # budget currency
    gpu_hour: Decimal  # the price of one GPU-hour, in ``currency``
    gpus: int
    currency: str  # the price's
    price_version: int


def has_fleets(book: PriceBook) -> bool:
    """Whether any version of ``book`` prices a deployment by the hour (else nothing here needs the archive)."""
    return any(price.gpu_hour is not None for version in book.versions for price in version.prices.values())


def priced_hours(book: PriceBook, start: datetime, end: datetime) -> Iterator[tuple[datetime, int, str, Price]]:
    """(hour start in UTC, price version, deployment, price) for every hour starting in [start, end) (aware
    datetimes; hours step from ``start``) and every deployment the version in force at the hour's start prices."""
    at = start.astimezone(timezone.utc)
    stop = end.astimezone(timezone.utc)
    while at < stop:
        try:
            version = book.in_force(at)
        except NoPriceInForce:
            at += HOUR
            continue
        for dep, price in sorted(version.prices.items()):
            yield at, version.version, dep, price
        at += HOUR


def fleet_hours(book: PriceBook, fx: FxTable, currency: str, start: datetime, end: datetime) -> list[FleetHour]:
    """Every priced fleet hour starting in [start, end) (aware datetimes; hours step from ``start``)."""
    out: list[FleetHour] = []
    for at, version, dep, price in priced_hours(book, start, end):
        per_hour = price.per_hour
        if per_hour is None or price.gpu_hour is None or price.gpus is None:
            continue
        micro = (per_hour * fx.rate(price.currency, currency, at) * 1_000_000).quantize(
            Decimal(1), rounding=ROUND_HALF_EVEN)
        out.append(FleetHour(dep, at, int(micro), price.gpu_hour, price.gpus, price.currency, version))
    return out


def month_window(month: str, tz: str, latest: datetime | None) -> tuple[datetime, datetime]:
    """The hours of ``month`` (YYYY-MM) in ``tz`` that have begun by ``latest`` (the archive's newest event: a
    month still running is counted to the end of its current hour, a closed one in full)."""
    zone = ZoneInfo(tz)
    year, mon = int(month[:4]), int(month[5:7])
    start = datetime(year, mon, 1, tzinfo=zone)
    end = datetime(year + mon // 12, mon % 12 + 1, 1, tzinfo=zone)
    if latest is not None and latest < end:
        passed = (latest - start) // HOUR + 1 if latest >= start else 0
        end = start + passed * HOUR
    return start, end


def hours_table(hours: list[FleetHour]) -> pa.Table:
    return pa.Table.from_pylist([
        {"deployment": h.deployment, "hour_start": h.start, "hour_end": h.start + HOUR, "cost_micro": h.cost_micro,
         "gpu_hour": str(h.gpu_hour), "gpus": h.gpus, "currency": h.currency, "price_version": h.price_version}
        for h in hours], schema=HOURS_SCHEMA)


# Each priced hour's attempts and their tokens; the hour's cost in whole shares by largest remainder.
SHARES_SQL = """
CREATE OR REPLACE TEMP VIEW fleet_shares AS
WITH t AS (
    SELECT a.request_id, a.attempt, a.event_time, h.deployment, h.hour_start, h.cost_micro,
           (coalesce(a.input_tokens, 0) + coalesce(a.cached_input_tokens, 0) + coalesce(a.cache_write_tokens, 0)
            + coalesce(a.output_tokens, 0) + coalesce(a.reasoning_tokens, 0))::HUGEINT AS tokens
    FROM attempts AS a JOIN fleet_hours AS h
      ON a.deployment = h.deployment AND a.event_time >= h.hour_start AND a.event_time < h.hour_end
), s AS (
    SELECT *, sum(tokens) OVER (PARTITION BY deployment, hour_start) AS total FROM t
), b AS (
    SELECT *, CASE WHEN total > 0 THEN cost_micro * tokens // total ELSE 0 END AS base,
              CASE WHEN total > 0 THEN cost_micro * tokens % total ELSE 0 END AS rem
    FROM s
), r AS (
    SELECT *, cost_micro - sum(base) OVER (PARTITION BY deployment, hour_start) AS left_over,
           row_number() OVER (PARTITION BY deployment, hour_start ORDER BY rem DESC, request_id, attempt) AS rank
    FROM b
)
SELECT request_id, attempt, event_time, deployment, hour_start, tokens,
       (base + CASE WHEN rank <= left_over THEN 1 ELSE 0 END)::BIGINT AS fleet_micro
FROM r WHERE total > 0
"""

IDLE_SQL = """
SELECT h.deployment, count(*)::BIGINT AS idle_hours, sum(h.cost_micro)::BIGINT AS idle_micro
FROM fleet_hours AS h
WHERE NOT EXISTS (SELECT 1 FROM fleet_shares AS s WHERE s.deployment = h.deployment AND s.hour_start = h.hour_start)
GROUP BY h.deployment ORDER BY h.deployment
"""


def attribute(warehouse: Warehouse, hours: list[FleetHour] | pa.Table, name: str = "fleet") -> Result:
    """Register ``hours`` as ``{name}_hours`` and the ``{name}_shares`` view over them (its share column
    ``{name}_micro``); the idle hours per deployment. ``reconcile.reserved`` splits its hours the same way under
    ``reserved`` (a table with at least deployment, hour_start, hour_end and cost_micro)."""
    warehouse.register(f"{name}_hours", hours if isinstance(hours, pa.Table) else hours_table(hours))
    warehouse.query(SHARES_SQL.replace("fleet_", f"{name}_"))
    return warehouse.query(IDLE_SQL.replace("fleet_", f"{name}_"))


def latest_event(warehouse: Warehouse) -> datetime | None:
    """The newest event time in the archive (None: no event)."""
    (latest,), = warehouse.query("SELECT max(event_time) FROM archive_rows").rows
    return latest
