"""The one typed row every provider usage export is normalised to, and the shared parsing rules.

A :class:`UsageRow` is one (provider, account, UTC day, model, token type)
count; a :class:`CostRow` is one amount of money a provider billed. Token types
are farebox's priced types (``ledger.usage.TOKEN_TYPES``: ``input`` is
uncached input only, ``cached_input``, ``cache_write``, ``output``,
``reasoning``); a quantity a provider bills that farebox does not price is
kept under the provider's own name (``input_audio_tokens``,
``web_search_requests``) so the drift report can flag it, never dropped.

Invariants the parsers keep:

* pure: they take bytes, str or already-parsed JSON and return rows; no I/O;
* money is ``Decimal`` from the provider's text (JSON numbers are read with
  ``parse_float=Decimal``), never a float;
* a time bucket is ``[start, end)`` in UTC and belongs to the day of its start;
  it must end no later than the next midnight, else :class:`ExportParseError`
  (splitting would have to invent how usage spread across the two days);
* rows are summed per key, so pages, projects, API keys and workspaces of one
  account, day and model fold into one row per token type;
* anything that does not parse raises :class:`ExportParseError` naming the
  field path (``data[3].results[0].output_tokens``) or CSV line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from typing import Any

from ledger.usage import TOKEN_TYPES
from reconcile.errors import InputError

PRICED_TYPES = frozenset(TOKEN_TYPES)

# ISO 4217 minor units of the currencies provider exports bill in: the lowest unit is 10^-n currency units.
MINOR_UNITS = {"USD": 2, "EUR": 2, "GBP": 2, "INR": 2, "AUD": 2, "CAD": 2, "CHF": 2, "SGD": 2, "SEK": 2, "NOK": 2,
               "DKK": 2, "BRL": 2, "MXN": 2, "ZAR": 2, "HKD": 2, "NZD": 2, "CNY": 2, "AED": 2, "SAR": 2, "PLN": 2,
               "JPY": 0, "KRW": 0, "IDR": 2, "KWD": 3, "BHD": 3, "OMR": 3, "JOD": 3}


def smallest_unit(currency: str) -> Decimal:
    """One lowest unit of ``currency`` in currency units (0.01 USD, 1 JPY); a currency not in ``MINOR_UNITS``
    is taken to have two decimals, the common case."""
    return Decimal(1).scaleb(-MINOR_UNITS.get(currency.upper(), 2))


class ExportParseError(InputError):
    """A provider export that does not have the documented shape; ``where`` names the field or line."""

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(f"{where}: {problem}")


@dataclass(frozen=True, slots=True)
class UsageRow:
    """Tokens (or, for an unpriced billed unit such as web searches, the count) of one key.

    ``requests`` is the number of model requests the provider counted for
    (account, day, model), repeated on each token-type row of that group, so it
    is never summed across token types; None when the export does not give it.
    """

    provider: str
    account: str
    day: date
    model: str
    token_type: str
    tokens: int
    requests: int | None = None
    tier: str | None = None  # the service tier the provider says it served (None: the report does not say)

    @property
    def priced(self) -> bool:
        """Whether farebox prices this token type at all."""
        return self.token_type in PRICED_TYPES


@dataclass(frozen=True, slots=True)
class CostRow:
    """Money a provider billed, in currency units (``Decimal``), at the finest grain the report gives.

    ``model`` and ``token_type`` are None when the report was not grouped that
    finely; ``description`` keeps the provider's own label (line item, cost type).
    ``quantity`` is the number of tokens the provider says it billed for this
    money (OpenAI Costs ``quantity``, CUR ``line_item_usage_amount``, ...): with
    it a money difference on agreeing tokens is told apart as a price mismatch.
    """

    provider: str
    account: str
    day: date
    model: str | None
    token_type: str | None
    amount: Decimal
    currency: str
    description: str | None = None
    invoice: str | None = None  # the provider invoice the charge is on, where the export names it
    tier: str | None = None  # the service tier billed (None: the report does not say)
    quantity: int | None = None  # the tokens the charge bills, where the export gives them (None: it does not)


def billed_sum(total: int | None, more: int | None) -> int | None:
    """Tokens billed by two charges summed: unknown (None) once either is (one line gave no count)."""
    return None if total is None or more is None else total + more


def load_json(raw: bytes | str | Any, where: str = "<export>") -> Any:
    """Parse JSON text with every non-integer number as ``Decimal``; parsed JSON passes through."""
    if not isinstance(raw, (bytes, bytearray, str)):
        return raw
    try:
        return json.loads(raw, parse_float=Decimal)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ExportParseError(where, f"not valid JSON ({exc})") from exc


def as_pages(pages: bytes | str | Mapping[str, Any] | Iterable[Any]) -> list[Any]:
    """One page or a list of pages (raw or parsed) as a list of parsed pages."""
    if isinstance(pages, (bytes, bytearray, str, Mapping)):
        pages = [pages]
    return [load_json(page, f"pages[{i}]") for i, page in enumerate(pages)]


def check_pagination(pages: list[Any]) -> None:
    """Every page but the last must say ``has_more: true``; the last must say false (nothing missing)."""
    for i, page in enumerate(pages):
        more = obj(page, f"pages[{i}]").get("has_more")
        if not isinstance(more, bool):
            raise ExportParseError(f"pages[{i}].has_more", f"must be true or false, got {more!r}")
        last = i == len(pages) - 1
        if more and last:
            raise ExportParseError(f"pages[{i}].has_more", "is true on the last page given: fetch next_page too")
        if not more and not last:
            raise ExportParseError(f"pages[{i}].has_more", "is false but more pages follow")


def obj(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ExportParseError(where, f"must be an object, got {type(value).__name__}")
    return value


def arr(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ExportParseError(where, f"must be a list, got {type(value).__name__}")
    return value


def count(record: Mapping[str, Any], key: str, where: str, *, required: bool = True) -> int:
    """A non-negative integer field (absent or null counts as 0 when not required)."""
    value = record.get(key)
    if value is None and not required:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ExportParseError(f"{where}.{key}", f"must be a non-negative integer, got {value!r}")
    return value


def text(record: Mapping[str, Any], key: str, where: str) -> str:
    """A required non-empty string field."""
    value = record.get(key)
    if not isinstance(value, str) or not value:
        raise ExportParseError(f"{where}.{key}", f"must be a non-empty string, got {value!r}")
    return value


def opt_text(record: Mapping[str, Any], key: str, where: str) -> str | None:
    """A string field that may be absent or null (ungrouped dimensions)."""
    return None if record.get(key) is None else text(record, key, where)


def decimal_amount(value: Any, where: str) -> Decimal:
    """A finite Decimal from a decimal string or a JSON number read as Decimal/int; never a float."""
    if isinstance(value, bool) or isinstance(value, float):
        raise ExportParseError(where, f"must be a decimal string or number read exactly, got {value!r}")
    try:
        amount = Decimal(value) if isinstance(value, (str, int, Decimal)) else None
    except InvalidOperation:
        amount = None
    if amount is None or not amount.is_finite():
        raise ExportParseError(where, f"must be a decimal amount, got {value!r}")
    return amount


def bucket_day(start: datetime, end: datetime, where: str) -> date:
    """The UTC day a ``[start, end)`` bucket belongs to; a bucket crossing midnight is refused."""
    if end <= start:
        raise ExportParseError(where, f"bucket ends ({end.isoformat()}) at or before it starts ({start.isoformat()})")
    next_midnight = datetime.combine(start.date() + timedelta(days=1), datetime.min.time(), timezone.utc)
    if end > next_midnight:
        raise ExportParseError(where, f"bucket [{start.isoformat()}, {end.isoformat()}) spans two UTC days; "
                                      "ask for buckets of one day or less")
    return start.date()


def unix_time(record: Mapping[str, Any], key: str, where: str) -> datetime:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ExportParseError(f"{where}.{key}", f"must be Unix seconds, got {value!r}")
    return datetime.fromtimestamp(value, timezone.utc)


def rfc3339_time(record: Mapping[str, Any], key: str, where: str) -> datetime:
    value = record.get(key)
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00")) if isinstance(value, str) else None
    except ValueError:
        at = None
    if at is None or at.utcoffset() is None:
        raise ExportParseError(f"{where}.{key}", f"must be an RFC 3339 time with an offset, got {value!r}")
    return at.astimezone(timezone.utc)


class UsageSums:
    """Sums tokens per (model, token type) and requests per model for one provider, account and day set."""

    def __init__(self, provider: str, account: str, types: tuple[str, ...] = TOKEN_TYPES) -> None:
        self.provider = provider
        self.account = account
        self.types = types  # the priced types this report tells apart; each is emitted even when zero
        self._tokens: dict[tuple[date, str, str, str | None], int] = {}
        self._requests: dict[tuple[date, str, str | None], int] = {}
        self._has_requests = False

    def add(self, day: date, model: str, token_type: str, tokens: int, tier: str | None = None) -> None:
        key = (day, model, token_type, tier)
        self._tokens[key] = self._tokens.get(key, 0) + tokens

    def add_requests(self, day: date, model: str, requests: int, tier: str | None = None) -> None:
        self._has_requests = True
        self._requests[(day, model, tier)] = self._requests.get((day, model, tier), 0) + requests

    def rows(self) -> list[UsageRow]:
        """Each of ``types`` for every (day, model, tier) seen (zeros included), other types only when non-zero."""
        groups = {(day, model, tier) for day, model, _, tier in self._tokens} | set(self._requests)
        out = []
        for day, model, tier in sorted(groups, key=lambda g: (g[0], g[1], g[2] or "")):
            requests = self._requests.get((day, model, tier), 0) if self._has_requests else None
            extra = sorted(t for d, m, t, r in self._tokens if (d, m, r) == (day, model, tier) and t not in self.types)
            for token_type in (*self.types, *extra):
                tokens = self._tokens.get((day, model, token_type, tier), 0)
                if tokens or token_type in self.types:
                    out.append(UsageRow(self.provider, self.account, day, model, token_type, tokens, requests, tier))
        return out
