"""The usage query port: what the admin usage API asks of the finance warehouse, and how its query is read.

``proxy`` never imports ``reconcile``: the composition root (``farebox/``)
wires an adapter over the Parquet archive (``farebox.usage``) into the app
under ``USAGE``. ``UsageQuery`` is all a handler may call; ``parse_usage_query``
turns the query string into a checked ``UsageAsk`` (pure, no I/O) or an
``InvalidRequest`` naming the field.

Money leaves as integer micro-units in ``*_micro`` columns and the currency
beside them; the JSON answer writes those integers as strings (exact in every
JSON reader), never as floats.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any, Protocol

from aiohttp import web

from proxy.errors import GatewayError, InvalidRequest

MAX_DAYS = 400  # a range longer than this is refused (a year and a bit: one yearly report)
FORMATS = ("json", "csv")


@dataclass(frozen=True, slots=True)
class UsageTable:
    """A query's answer: column names in order, one dict per row, and the whole range's totals (or None)."""

    columns: tuple[str, ...]
    rows: list[dict[str, Any]]
    totals: dict[str, Any] | None = None
    warnings: tuple[str, ...] = ()  # archive files left out of the answer (not vouched for by the manifest)


class UsageUnavailable(GatewayError):
    """The warehouse cannot answer (an unreadable archive file, a file of a newer schema): 503 naming why."""

    status = 503
    code = "usage_unavailable"


class UsageQuery(Protocol):
    """Usage from the finance warehouse: requests admitted on days [start, end] of the budget zone ``tz``."""

    dimensions: tuple[str, ...]  # the columns ``by`` may name

    async def usage(self, start: date, end: date, by: Sequence[str], tz: str) -> UsageTable:
        """Requests, tokens, spend, fallbacks, TTFT percentiles and cache savings per group of ``by``."""
        ...

    async def budget_events(self, start: date, end: date, tz: str, limit: int) -> UsageTable:
        """Budget threshold crossings and budget refusals on days [start, end], most recent first."""
        ...


USAGE = web.AppKey("usage", UsageQuery)


@dataclass(frozen=True, slots=True)
class UsageAsk:
    """A checked usage query: the day range (inclusive), the group-by columns and the answer format."""

    start: date
    end: date
    by: tuple[str, ...] = ()
    fmt: str = "json"
    limit: int = 50


def _day(raw: str | None, name: str, default: date) -> date:
    if raw is None or raw == "":
        return default
    try:
        return date.fromisoformat(raw)
    except ValueError:
        raise InvalidRequest(f"{name} must be a date like 2026-12-01, got {raw!r}.", param=name) from None


def month_start(today: date) -> date:
    return today.replace(day=1)


def wants_csv(query: Mapping[str, str], accept: str | None) -> str:
    """``format=csv|json`` wins; else ``Accept: text/csv`` asks for CSV; else JSON."""
    fmt = query.get("format")
    if fmt is not None:
        if fmt not in FORMATS:
            raise InvalidRequest(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}.", param="format")
        return fmt
    return "csv" if accept and "text/csv" in accept.lower() else "json"


def parse_usage_query(query: Mapping[str, str], accept: str | None, today: date,
                      dimensions: Sequence[str], *, need_by: bool = True) -> UsageAsk:
    """``from``/``to`` (default: this budget month so far), ``by`` (or ``group_by``; default team) and
    ``format``; an ``InvalidRequest`` names the first field at fault."""
    known = {"from", "to", "by", "group_by", "format", "limit"}
    for name in query:
        if name not in known:
            raise InvalidRequest(f"Unknown query parameter {name!r}; use {', '.join(sorted(known))}.", param=name)
    start = _day(query.get("from"), "from", month_start(today))
    end = _day(query.get("to"), "to", today)
    if end < start:
        raise InvalidRequest(f"to ({end}) is before from ({start}).", param="to")
    if end - start > timedelta(days=MAX_DAYS):
        raise InvalidRequest(f"The range from {start} to {end} is longer than {MAX_DAYS} days; ask for less.",
                             param="from")
    by: tuple[str, ...] = ()
    if need_by:
        field_name = "group_by" if "group_by" in query and "by" not in query else "by"
        raw = query.get(field_name, "team")
        names = [n.strip() for n in raw.split(",") if n.strip()]
        if not names:
            raise InvalidRequest(f"{field_name} names no column; choose from {', '.join(dimensions)}.",
                                 param=field_name)
        for name in names:
            if name not in dimensions:
                raise InvalidRequest(f"{field_name} has an unknown column {name!r}; choose from "
                                     f"{', '.join(dimensions)}.", param=field_name)
        by = tuple(dict.fromkeys(names))
    limit = 50
    if "limit" in query:
        raw_limit = query["limit"]
        if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= 1000:
            raise InvalidRequest(f"limit must be an integer from 1 to 1000, got {raw_limit!r}.", param="limit")
        limit = int(raw_limit)
    return UsageAsk(start, end, by, wants_csv(query, accept), limit)


def money_strings(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row for JSON: ``*_micro`` integers as decimal strings (exact), dates as ISO strings."""
    out: dict[str, Any] = {}
    for name, value in row.items():
        if name.endswith("_micro") and isinstance(value, int) and not isinstance(value, bool):
            out[name] = str(value)
        elif isinstance(value, date):
            out[name] = value.isoformat()
        else:
            out[name] = value
    return out
