"""HTTP clients that fetch one UTC day of a provider's usage export; the parsing is elsewhere.

Each returns the raw response bodies (bytes) in order, so the caller can keep
the provider's own text beside its report and feed it to the pure parsers in
``reconcile.exports``. Credentials are parameters: they go into a request
header and nowhere else; error messages carry the URL path and status, never a
key, and any echo of the key in a provider's error body is blanked out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date, datetime, time, timedelta, timezone

import aiohttp
import orjson

from reconcile.errors import SourceUnavailable

DEFAULT_TIMEOUT = aiohttp.ClientTimeout(total=60)
MAX_PAGES = 1000  # a cursor that never ends is a provider fault, not a reason to loop forever


class ExportFetchError(SourceUnavailable):
    """A usage export could not be fetched; ``status`` is the HTTP status (None: no answer)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        self.status = status
        super().__init__(message)


def day_bounds(day: date) -> tuple[datetime, datetime]:
    """``[midnight, next midnight)`` of ``day`` in UTC."""
    start = datetime.combine(day, time.min, timezone.utc)
    return start, start + timedelta(days=1)


async def fetch_simulator_export(session: aiohttp.ClientSession, base_url: str, account: str, day: date,
                                 *, csv: bool = False) -> bytes:
    """``GET {base_url}/v1/usage/export?account=&date=[&format=csv]``: the simulator's export body."""
    params = {"account": account, "date": day.isoformat(), **({"format": "csv"} if csv else {})}
    return await _get(session, f"{base_url.rstrip('/')}/v1/usage/export", params, {}, secret=None)


async def fetch_openai_usage(session: aiohttp.ClientSession, admin_key: str, day: date,
                             base_url: str = "https://api.openai.com", kind: str = "completions") -> list[bytes]:
    """Every page of one day's usage of one endpoint (``reconcile.exports.openai.USAGE_KINDS``: completions,
    embeddings, moderations, images, audio), one bucket per day, grouped by model."""
    start, end = day_bounds(day)
    params = {"start_time": str(int(start.timestamp())), "end_time": str(int(end.timestamp())),
              "bucket_width": "1d", "group_by": "model", "limit": "31"}
    return await _pages(session, f"{base_url.rstrip('/')}/v1/organization/usage/{kind}", params,
                        {"Authorization": f"Bearer {admin_key}"}, admin_key)


async def fetch_openai_costs(session: aiohttp.ClientSession, admin_key: str, day: date,
                             base_url: str = "https://api.openai.com") -> list[bytes]:
    """Every page of one day's costs, grouped by line item (``"<model>, <kind>"``)."""
    start, end = day_bounds(day)
    params = {"start_time": str(int(start.timestamp())), "end_time": str(int(end.timestamp())),
              "bucket_width": "1d", "group_by": "line_item", "limit": "31"}
    return await _pages(session, f"{base_url.rstrip('/')}/v1/organization/costs", params,
                        {"Authorization": f"Bearer {admin_key}"}, admin_key)


async def fetch_anthropic_usage(session: aiohttp.ClientSession, admin_key: str, day: date,
                                base_url: str = "https://api.anthropic.com") -> list[bytes]:
    """Every page of one day's messages usage report, one bucket per day, grouped by model."""
    start, end = day_bounds(day)
    params = [("starting_at", start.isoformat()), ("ending_at", end.isoformat()), ("bucket_width", "1d"),
              ("group_by[]", "model")]
    return await _pages(session, f"{base_url.rstrip('/')}/v1/organizations/usage_report/messages", params,
                        _anthropic_headers(admin_key), admin_key)


async def fetch_anthropic_costs(session: aiohttp.ClientSession, admin_key: str, day: date,
                                base_url: str = "https://api.anthropic.com") -> list[bytes]:
    """Every page of one day's cost report, grouped by description (model and token type)."""
    start, end = day_bounds(day)
    params = [("starting_at", start.isoformat()), ("ending_at", end.isoformat()), ("bucket_width", "1d"),
              ("group_by[]", "description")]
    return await _pages(session, f"{base_url.rstrip('/')}/v1/organizations/cost_report", params,
                        _anthropic_headers(admin_key), admin_key)


def _anthropic_headers(admin_key: str) -> dict[str, str]:
    return {"x-api-key": admin_key, "anthropic-version": "2023-06-01"}


Params = Mapping[str, str] | Sequence[tuple[str, str]]


async def _pages(session: aiohttp.ClientSession, url: str, params: Params, headers: Mapping[str, str],
                 secret: str) -> list[bytes]:
    """Follow ``has_more`` / ``next_page`` (sent back as ``page``) until the last page."""
    if not isinstance(secret, str) or not secret.strip():
        raise ExportFetchError(f"{_path(url)}: no admin API key for this account; the report needs one")
    base = list(params.items()) if isinstance(params, Mapping) else list(params)
    bodies: list[bytes] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        query = base + ([("page", cursor)] if cursor else [])
        body = await _get(session, url, query, headers, secret)
        bodies.append(body)
        try:
            page = orjson.loads(body)
            more, cursor = bool(page.get("has_more")), page.get("next_page")
        except (orjson.JSONDecodeError, AttributeError):
            return bodies  # the parser names what is wrong with it
        if not more:
            return bodies
        if not isinstance(cursor, str) or not cursor:
            raise ExportFetchError(f"{_path(url)}: has_more is true but next_page is {cursor!r}")
    raise ExportFetchError(f"{_path(url)}: more than {MAX_PAGES} pages")


async def _get(session: aiohttp.ClientSession, url: str, params: Params, headers: Mapping[str, str],
               secret: str | None) -> bytes:
    try:
        async with session.get(url, params=params, headers=headers, timeout=DEFAULT_TIMEOUT) as resp:
            body = await resp.read()
            if resp.status != 200:
                detail = body[:300].decode("utf-8", "replace")
                if secret:
                    detail = detail.replace(secret, "<redacted>")
                raise ExportFetchError(f"{_path(url)} answered {resp.status}: {detail}", resp.status)
            return body
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise ExportFetchError(f"{_path(url)}: {type(exc).__name__}") from None


def _path(url: str) -> str:
    return url.split("?", 1)[0]
