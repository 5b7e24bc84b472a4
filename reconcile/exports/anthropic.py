"""Parsers for Anthropic's Admin API usage report (messages) and cost report.

Usage, ``GET /v1/organizations/usage_report/messages``: pages
``{"data": [bucket], "has_more", "next_page"}``; a bucket is
``{"starting_at", "ending_at", "results": [...]}`` (RFC 3339, ``[start, end)``);
a result is ``{"uncached_input_tokens", "cache_read_input_tokens",
"cache_creation": {"ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens"},
"output_tokens", "server_tool_use": {"web_search_requests"}, "model",
"workspace_id", "api_key_id", "service_tier", "context_window"}``.

``uncached_input_tokens`` EXCLUDES cache reads and cache creation, so it is
farebox's ``input`` as it stands; cache creation comes split by lifetime and
both lifetimes are ``cache_write`` (summed). Thinking is billed as output and
not reported apart, so there is no ``reasoning`` row. Server tool calls are
kept by their own names (``web_search_requests``) as unpriced billed units.
The report gives no request counts.

Costs, ``GET /v1/organizations/cost_report``: the same page and bucket shape;
a result is ``{"amount", "currency", "cost_type", "description", "model",
"service_tier", "token_type", "workspace_id", "context_window"}`` where
``amount`` is a decimal string in the currency's LOWEST unit (cents:
``"123.45"`` USD is $1.2345), converted here to currency units.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import date
from decimal import Decimal
from typing import Any

from reconcile.exports.rows import (
    MINOR_UNITS,
    CostRow,
    ExportParseError,
    UsageRow,
    UsageSums,
    arr,
    as_pages,
    bucket_day,
    check_pagination,
    count,
    decimal_amount,
    obj,
    opt_text,
    rfc3339_time,
    text,
)

PROVIDER = "anthropic"
USAGE_TYPES = ("input", "cached_input", "cache_write", "output")  # what the usage report tells apart
_UNGROUPED_MODEL = "*"  # results not grouped by model carry model null

_COST_TOKEN_TYPES = {"uncached_input_tokens": "input", "cache_read_input_tokens": "cached_input",
                     "cache_creation.ephemeral_5m_input_tokens": "cache_write",
                     "cache_creation.ephemeral_1h_input_tokens": "cache_write", "output_tokens": "output"}

Pages = bytes | str | Mapping[str, Any] | Iterable[Any]


def _results(pages: Pages) -> Iterable[tuple[date, str, Mapping[str, Any]]]:
    """(day, path, result) for every result of every bucket of every page, pagination checked."""
    parsed = as_pages(pages)
    check_pagination(parsed)
    for p, page in enumerate(parsed):
        prefix = f"pages[{p}]." if len(parsed) > 1 else ""
        for b, bucket in enumerate(arr(obj(page, prefix.rstrip(".") or "<page>").get("data"), f"{prefix}data")):
            bpath = f"{prefix}data[{b}]"
            bucket = obj(bucket, bpath)
            day = bucket_day(rfc3339_time(bucket, "starting_at", bpath), rfc3339_time(bucket, "ending_at", bpath),
                             bpath)
            for r, result in enumerate(arr(bucket.get("results"), f"{bpath}.results")):
                yield day, f"{bpath}.results[{r}]", obj(result, f"{bpath}.results[{r}]")


def parse_anthropic_usage(pages: Pages, account: str) -> list[UsageRow]:
    """Messages usage pages (raw or parsed, in order) of one organization -> rows for ``account``."""
    sums = UsageSums(PROVIDER, account, USAGE_TYPES)
    for day, rpath, result in _results(pages):
        model = opt_text(result, "model", rpath) or _UNGROUPED_MODEL
        tier = opt_text(result, "service_tier", rpath)  # standard, priority, batch (when grouped by it)
        sums.add(day, model, "input", count(result, "uncached_input_tokens", rpath), tier)
        sums.add(day, model, "cached_input", count(result, "cache_read_input_tokens", rpath, required=False), tier)
        creation = result.get("cache_creation")
        if creation is not None:
            cpath = f"{rpath}.cache_creation"
            creation = obj(creation, cpath)
            for lifetime in ("ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens"):
                sums.add(day, model, "cache_write", count(creation, lifetime, cpath, required=False), tier)
        sums.add(day, model, "output", count(result, "output_tokens", rpath), tier)
        tools = result.get("server_tool_use")
        if tools is not None:
            tpath = f"{rpath}.server_tool_use"
            for name in obj(tools, tpath):
                sums.add(day, model, name, count(tools, name, tpath, required=False), tier)
    return sums.rows()


def parse_anthropic_costs(pages: Pages, account: str) -> list[CostRow]:
    """Cost report pages -> money rows in currency units, summed per (day, model, token type, description)."""
    sums: dict[tuple[date, str | None, str | None, str | None, str, str | None], Decimal] = {}
    for day, rpath, result in _results(pages):
        currency = text(result, "currency", rpath).upper()
        if currency not in MINOR_UNITS:
            raise ExportParseError(f"{rpath}.currency", f"unknown currency {currency!r}: its lowest unit is not known")
        amount = decimal_amount(result.get("amount"), f"{rpath}.amount").scaleb(-MINOR_UNITS[currency])
        model = opt_text(result, "model", rpath)
        raw_type = opt_text(result, "token_type", rpath)
        cost_type = opt_text(result, "cost_type", rpath)
        if raw_type is not None:
            token_type: str | None = _COST_TOKEN_TYPES.get(raw_type, raw_type)
        elif cost_type not in (None, "tokens"):
            token_type = cost_type  # web_search, code_execution: billed units farebox does not price
        else:
            token_type = None
        description = opt_text(result, "description", rpath)
        key = (day, model, token_type, description, currency, opt_text(result, "service_tier", rpath))
        sums[key] = sums.get(key, Decimal(0)) + amount
    ordered = sorted(sums.items(), key=lambda kv: tuple("" if x is None else str(x) for x in kv[0]))
    return [CostRow(PROVIDER, account, day, model, token_type, amount, currency, description, tier=tier)
            for (day, model, token_type, description, currency, tier), amount in ordered]
