"""Provisioned capacity (a reservation): each hour's flat charge to the team that owns it, and how much was used.

* **The hours.** ``reserved_hours`` lists, for a window, every hour in which the price version in force at the
  hour's start gives a deployment a reservation (``Price.reserved_hour``, or ``Price.reserved_month``), with that
  hour's cost. A monthly price is spread over the hours of each UTC month exactly: of a month of ``n`` hours
  costing ``T`` micro-units, hour ``i`` costs ``floor((i+1)T/n) - floor(iT/n)``, so the month's hours add up to
  ``T`` whatever window is asked. In another budget currency an hour is converted at its FX rate and rounded
  half-even to a micro-unit once.
* **Charged flat, once.** Every reserved hour is the owning team's charge (``Price.reserved_team``), used or not:
  showback's ``reserved_micro`` on a row of its own per deployment; FOCUS's ``Purchase`` rows
  (``reconcile.focus.reserved_lines``). The gateway never holds or charges it: the reservation's token prices
  (its marginal cost, 0 when it is paid in full) are what budgets see.
* **Used and unused.** An hour in which the deployment served tokens is used; its cost is split over the
  attempts in it by their tokens (``reconcile.fleet.attribute`` under ``reserved``: whole micro-units, exact),
  which FOCUS's ``Used`` rows carry; an hour with none is unused. Utilisation is used hours over reserved hours.

Pure but for the warehouse query.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

import pyarrow as pa

from pricing.book import FxTable, Price, PriceBook
from reconcile.fleet import HOUR, attribute, priced_hours
from reconcile.warehouse import Warehouse

MICRO = Decimal(1_000_000)
HOURS_SCHEMA = pa.schema([("deployment", pa.string()), ("hour_start", pa.timestamp("us", tz="UTC")),
                          ("hour_end", pa.timestamp("us", tz="UTC")), ("cost_micro", pa.int64()),
                          ("team", pa.string()), ("unit_price", pa.string()), ("currency", pa.string()),
                          ("price_version", pa.int64())])


@dataclass(frozen=True, slots=True)
class ReservedHour:
    deployment: str
    start: datetime  # UTC
    cost_micro: int  # budget currency
    team: str  # who the hour is charged to
    unit_price: Decimal  # one reserved hour in ``currency``: reserved_hour, or reserved_month / the month's hours
    currency: str  # the price's
    price_version: int


def has_reservations(book: PriceBook) -> bool:
    """Whether any version of ``book`` has a reservation (else nothing here needs the archive)."""
    return any(price.reserved for version in book.versions for price in version.prices.values())


def month_hours(at: datetime) -> tuple[int, int]:
    """(index of the UTC hour starting at ``at`` in its UTC month, how many hours the month has)."""
    days = calendar.monthrange(at.year, at.month)[1]
    return (at.day - 1) * 24 + at.hour, days * 24


def hour_micro(price: Price, at: datetime) -> int:
    """What the UTC hour starting at ``at`` costs under ``price``'s reservation, in micro-units of its currency."""
    if price.reserved_hour is not None:
        return int((price.reserved_hour * MICRO).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))
    assert price.reserved_month is not None
    total = int((price.reserved_month * MICRO).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))
    index, hours = month_hours(at)
    return (index + 1) * total // hours - index * total // hours


def unit_price(price: Price, at: datetime) -> Decimal:
    """One reserved hour's list price in the price's currency (a monthly price over its month's hours, to the
    micro-unit: the hours themselves are exact, ``hour_micro``)."""
    if price.reserved_hour is not None:
        return price.reserved_hour
    assert price.reserved_month is not None
    return (price.reserved_month / month_hours(at)[1]).quantize(Decimal("0.000001"), rounding=ROUND_HALF_EVEN)


def reserved_hours(book: PriceBook, fx: FxTable, currency: str, start: datetime, end: datetime
                   ) -> list[ReservedHour]:
    """Every reserved UTC hour starting in [start, end) (aware datetimes): each hour belongs to the window it
    starts in, so windows in a zone a half hour off UTC still count every hour once."""
    out: list[ReservedHour] = []
    first = start.astimezone(timezone.utc)
    if first.minute or first.second or first.microsecond:  # a zone a half hour off UTC: the hours starting in it
        first = first.replace(minute=0, second=0, microsecond=0) + HOUR
    for at, version, dep, price in priced_hours(book, first, end):
        if not price.reserved:
            continue
        micro = hour_micro(price, at)
        if price.currency != currency:
            micro = int((micro * fx.rate(price.currency, currency, at)).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))
        assert price.reserved_team is not None
        out.append(ReservedHour(dep, at, micro, price.reserved_team, unit_price(price, at), price.currency, version))
    return out


def hours_table(hours: list[ReservedHour]) -> pa.Table:
    return pa.Table.from_pylist([
        {"deployment": h.deployment, "hour_start": h.start, "hour_end": h.start + HOUR, "cost_micro": h.cost_micro,
         "team": h.team, "unit_price": str(h.unit_price), "currency": h.currency, "price_version": h.price_version}
        for h in hours], schema=HOURS_SCHEMA)


_SUMMARY_SQL = """
SELECT h.deployment, any_value(h.team) AS team, count(*)::BIGINT AS reserved_hours,
       sum(h.cost_micro)::BIGINT AS reserved_micro,
       count(*) FILTER (WHERE u.hour_start IS NOT NULL)::BIGINT AS used_hours,
       coalesce(sum(u.tokens), 0)::BIGINT AS tokens, coalesce(sum(u.attempts), 0)::BIGINT AS attempts
FROM reserved_hours AS h
LEFT JOIN (SELECT deployment, hour_start, sum(tokens) AS tokens, count(*) AS attempts FROM reserved_shares
           GROUP BY ALL) AS u ON u.deployment = h.deployment AND u.hour_start = h.hour_start
GROUP BY h.deployment ORDER BY h.deployment
"""


def register(warehouse: Warehouse, hours: list[ReservedHour]) -> None:
    """``reserved_hours`` and its ``reserved_shares`` (each used hour split over its attempts by tokens)."""
    attribute(warehouse, hours_table(hours), "reserved")


def summary(warehouse: Warehouse, hours: list[ReservedHour]) -> list[dict[str, Any]]:
    """Per reserved deployment: the owning team, hours reserved and their cost, hours used, the tokens and
    attempts served in them, and ``utilisation_pct`` (used over reserved hours, to 0.1)."""
    if not hours:
        return []
    register(warehouse, hours)
    out = warehouse.query(_SUMMARY_SQL).dicts()
    for entry in out:
        entry["utilisation_pct"] = str((Decimal(100 * entry["used_hours"]) / entry["reserved_hours"]).quantize(
            Decimal("0.1"), rounding=ROUND_HALF_EVEN))
    return out

