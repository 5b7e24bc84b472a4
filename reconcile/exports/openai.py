"""Parsers for OpenAI's organization usage reports (every endpoint) and costs report.

Usage, ``GET /v1/organization/usage/completions``: pages
``{"object": "page", "data": [bucket], "has_more", "next_page"}``; a bucket is
``{"object": "bucket", "start_time", "end_time", "results": [...]}`` (Unix
seconds, ``[start, end)``); a result is
``{"object": "organization.usage.completions.result", "input_tokens",
"input_cached_tokens", "output_tokens", "input_audio_tokens",
"output_audio_tokens", "num_model_requests", "project_id", "user_id",
"api_key_id", "model", "batch"}``.

``input_tokens`` INCLUDES ``input_cached_tokens``: farebox's ``input``
(uncached) is their difference, exactly as the gateway splits a response's
``prompt_tokens`` (``ledger.usage.TokenUsage.from_openai``). Audio tokens
are kept as the unpriced types ``input_audio_tokens`` / ``output_audio_tokens``.
The report does not split out reasoning tokens (they are inside
``output_tokens``) nor cache writes, so it yields only ``input``,
``cached_input`` and ``output`` rows; ``reconcile.drift.compare_tokens`` folds
our ``reasoning`` into ``output`` for a group whose provider reports no
``reasoning`` row.

The other usage endpoints (``USAGE_KINDS``) share the page and bucket shape,
with result objects ``organization.usage.<kind>.result``: ``embeddings`` and
``moderations`` count ``input_tokens`` (farebox's ``input``); ``images``
counts ``images``, ``audio_speeches`` ``characters`` and
``audio_transcriptions`` ``seconds``, kept as types of those names (billed
units farebox does not route or price: traffic that did not pass the gateway
shows there). All carry ``num_model_requests``. A day with embedding traffic
therefore reconciles: both sides count the embedding model's input tokens.

Costs, ``GET /v1/organization/costs``: the same page and bucket shape; a
result is ``{"object": "organization.costs.result", "amount": {"value",
"currency"}, "line_item", "project_id", "quantity"}`` with ``value`` a JSON
number (read as Decimal) and ``currency`` lower case (``"usd"``). A
``line_item`` of the form ``"<model>, <kind>"`` (``"gpt-4o-2024-08-06, cached
input"``, ``"…, cache writes"``) gives the model and token type; any other line
item is kept as its own unpriced type. ``quantity``, where given, is the units
the line item bills (tokens for a token line item): summed per row, it lets the
drift report tell a price mismatch (tokens agree, money does not) from a usage
difference. A row of the key without it leaves the key's quantity unknown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import date
from decimal import Decimal
from typing import Any

from reconcile.exports.billing_text import add_money, quantity, whole
from reconcile.exports.rows import (
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
    text,
    unix_time,
)

PROVIDER = "openai"
USAGE_TYPES = ("input", "cached_input", "output")  # what the completions report tells apart
# endpoint -> (the types it reports, each result field -> the type it counts)
USAGE_KINDS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "completions": (USAGE_TYPES, {}),
    "embeddings": (("input",), {"input_tokens": "input"}),
    "moderations": (("input",), {"input_tokens": "input"}),
    "images": ((), {"images": "images"}),
    "audio_speeches": ((), {"characters": "characters"}),
    "audio_transcriptions": ((), {"seconds": "seconds"}),
}
_UNGROUPED_MODEL = "*"  # results not grouped by model (no group_by=model) carry model null

# line-item kinds -> farebox token types
_LINE_KINDS = {"input": "input", "cached input": "cached_input", "output": "output",
               "reasoning": "reasoning", "cache write": "cache_write", "cache writes": "cache_write",
               "cached input tokens": "cached_input", "input tokens": "input", "output tokens": "output"}

Pages = bytes | str | Mapping[str, Any] | Iterable[Any]


def _buckets(pages: Pages, result_object: str) -> Iterable[tuple[date, str, Mapping[str, Any]]]:
    """(day, path, result) for every result of every bucket of every page, pagination checked."""
    parsed = as_pages(pages)
    check_pagination(parsed)
    for p, page in enumerate(parsed):
        where = f"pages[{p}]" if len(parsed) > 1 else ""
        prefix = f"{where}." if where else ""
        for b, bucket in enumerate(arr(obj(page, where or "<page>").get("data"), f"{prefix}data")):
            bpath = f"{prefix}data[{b}]"
            bucket = obj(bucket, bpath)
            day = bucket_day(unix_time(bucket, "start_time", bpath), unix_time(bucket, "end_time", bpath), bpath)
            for r, result in enumerate(arr(bucket.get("results"), f"{bpath}.results")):
                rpath = f"{bpath}.results[{r}]"
                result = obj(result, rpath)
                if result.get("object") != result_object:
                    raise ExportParseError(f"{rpath}.object", f"must be {result_object!r}, got {result.get('object')!r}")
                yield day, rpath, result


def parse_openai_usage(pages: Pages, account: str, kind: str = "completions") -> list[UsageRow]:
    """Usage pages of one endpoint (``USAGE_KINDS``; raw or parsed, in order) of one organization -> rows for
    ``account``."""
    if kind not in USAGE_KINDS:
        raise ExportParseError("<endpoint>", f"unknown OpenAI usage endpoint {kind!r}; known: {', '.join(USAGE_KINDS)}")
    types, fields = USAGE_KINDS[kind]
    sums = UsageSums(PROVIDER, account, types)
    for day, rpath, result in _buckets(pages, f"organization.usage.{kind}.result"):
        model = opt_text(result, "model", rpath) or _UNGROUPED_MODEL
        if kind != "completions":
            for name, token_type in fields.items():
                sums.add(day, model, token_type, count(result, name, rpath))
            sums.add_requests(day, model, count(result, "num_model_requests", rpath))
            continue
        # the tier served, when the report is grouped by it (``service_tier``), else a batch's (``batch: true``)
        tier = opt_text(result, "service_tier", rpath) or ("batch" if result.get("batch") is True else None)
        total_in = count(result, "input_tokens", rpath)
        cached = count(result, "input_cached_tokens", rpath, required=False)
        if cached > total_in:
            raise ExportParseError(f"{rpath}.input_cached_tokens",
                                   f"{cached} exceeds input_tokens {total_in}, which include them")
        sums.add(day, model, "input", total_in - cached, tier)
        sums.add(day, model, "cached_input", cached, tier)
        sums.add(day, model, "output", count(result, "output_tokens", rpath), tier)
        for audio in ("input_audio_tokens", "output_audio_tokens"):
            sums.add(day, model, audio, count(result, audio, rpath, required=False), tier)
        sums.add_requests(day, model, count(result, "num_model_requests", rpath), tier)
    return sums.rows()


def parse_openai_costs(pages: Pages, account: str) -> list[CostRow]:
    """Costs pages -> money rows summed per (day, model, token type, line item), in upper-case currency."""
    sums: dict[tuple[date, str | None, str | None, str | None, str], tuple[Decimal, int | None]] = {}
    for day, rpath, result in _buckets(pages, "organization.costs.result"):
        amount = obj(result.get("amount"), f"{rpath}.amount")
        value = decimal_amount(amount.get("value"), f"{rpath}.amount.value")
        currency = text(amount, "currency", f"{rpath}.amount")
        line_item = opt_text(result, "line_item", rpath)
        model, token_type = _line_item(line_item)
        billed = None if result.get("quantity") is None else whole(quantity(result["quantity"], f"{rpath}.quantity"),
                                                                   f"{rpath}.quantity")
        add_money(sums, (day, model, token_type, line_item, currency.upper()), value, billed)
    return [CostRow(PROVIDER, account, day, model, token_type, amount, currency, line_item, quantity=billed)
            for (day, model, token_type, line_item, currency), (amount, billed) in sorted(sums.items(),
                                                                                         key=_cost_order)]


def _line_item(line_item: str | None) -> tuple[str | None, str | None]:
    """(model, token type) of ``"<model>, <kind>"``; other labels are their own unpriced type, no model."""
    if line_item is None:
        return None, None
    model, sep, kind = line_item.rpartition(", ")
    if sep and model and kind.strip().lower() in _LINE_KINDS:
        return model, _LINE_KINDS[kind.strip().lower()]
    return None, line_item


def _cost_order(item: tuple[tuple[Any, ...], object]) -> tuple[str, ...]:
    return tuple("" if part is None else str(part) for part in item[0])
