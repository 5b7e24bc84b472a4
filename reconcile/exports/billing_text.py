"""What cloud billing exports share: reading a local copy of an export, and telling model and token type from a
meter's or SKU's words.

Cloud providers bill model tokens as meters (Azure), SKUs (Google Cloud) or
usage types (AWS) whose names carry the model and the token type in words:
``gpt-4o-0806 Inp glbl Tokens``, ``Gemini 2.5 Flash Input text token count``,
``USE1-Claude3.5Sonnet-v2-output-tokens``. ``token_kind`` finds the token type
by its keyword (the first of ``KINDS`` found, as a whole word) and takes the
words before it as the model; a name with no keyword is not a token charge (the
caller keeps it as a billed unit of its own, which reconciliation flags as a
type farebox never prices). ``Models`` turns a billing name into the model id
our events carry: the account's ``models`` mapping first (billing name -> our
model), else our model whose letters and digits match the name's, else the
name as it is (then both sides show a row the other lacks, flagged as
``missing_rows``: add the mapping).

``unit_tokens`` reads a unit of measure (``1K``, ``1M tokens``, ``count``) as a
multiplier; ``export_files`` lists an export's files under a folder (a local copy
of the bucket the provider writes to), plain or gzipped, in name order.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterable, Mapping
from datetime import date, datetime, timezone
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any

from reconcile.exports.rows import CostRow, ExportParseError, billed_sum, decimal_amount

# (model or "*", token type, invoice, currency) -> (amount, tokens billed; None once any line gives none)
Money = dict[tuple[str, str, str | None, str], tuple[Decimal, int | None]]

# keyword (a regular expression over lower-case words) -> token type; the first found wins, in this order
KINDS: tuple[tuple[str, str], ...] = (
    (r"cache[ -]?read|cached|cchd|cache[ -]?hit", "cached_input"),
    (r"cache[ -]?write|cache[ -]?creation|cache[ -]?storage", "cache_write"),
    (r"thinking|reasoning", "reasoning"),
    (r"input|inp", "input"),
    (r"output|outp", "output"),
)
_KIND = re.compile(r"(?:^|[\s_\-:(])(" + "|".join(f"(?:{k})" for k, _ in KINDS) + r")(?=$|[\s_\-:)])", re.I)
_UNITS = {"k": 1_000, "m": 1_000_000, "": 1}


def token_kind(name: str) -> tuple[str, str] | None:
    """(model words, token type) of a meter/SKU/usage-type name, or None when it names no token type."""
    match = _KIND.search(name)
    if match is None:
        return None
    word = match.group(1).lower()
    kind = next(t for k, t in KINDS if re.fullmatch(k, word))
    model = name[:match.start(1)].strip(" -_:(")
    return (model, kind) if model else None


def normalized(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


class Models:
    """Billing names -> the model ids our events carry (see the module docstring)."""

    def __init__(self, mapping: Mapping[str, str] | None = None, ours: Iterable[str] = ()) -> None:
        self.mapping = {normalized(k): v for k, v in (mapping or {}).items()}
        self.ours = {normalized(m): m for m in ours}

    def __call__(self, billing_name: str) -> str:
        key = normalized(billing_name)
        return self.mapping.get(key) or self.ours.get(key) or billing_name


def unit_tokens(unit: str | None, where: str) -> int:
    """The multiplier of a unit of measure: ``1K``/``1K tokens``/``1000`` -> 1000, ``1M`` -> 10^6, a plain count 1."""
    text = (unit or "").strip().lower()
    match = re.fullmatch(r"(\d+)?\s*([km])?\s*(?:tokens?|count|units?|requests?)?", text)
    if match is None:
        raise ExportParseError(where, f"unknown unit of measure {unit!r}")
    number = int(match.group(1) or 1)
    return number * _UNITS[match.group(2) or ""]


def whole(amount: Decimal, where: str) -> int:
    """A token quantity as an integer: exact when whole, else to the nearest token (a unit of 1K tokens given to
    more decimals than it holds)."""
    if amount < 0:
        raise ExportParseError(where, f"must not be negative, got {amount}")
    return int(amount.to_integral_value(rounding=ROUND_HALF_EVEN))


def quantity(value: object, where: str, *, signed: bool = False) -> Decimal:
    """An export's number (decimal text, surrounding spaces allowed, or a JSON number read as Decimal), exact;
    negative only where ``signed`` (money: credits, refunds)."""
    amount = decimal_amount(value.strip() if isinstance(value, str) else value, where)
    if amount < 0 and not signed:
        raise ExportParseError(where, f"must be a non-negative number, got {value!r}")
    return amount


def utc_time(value: object, where: str, *, naive_is_utc: bool = False) -> datetime:
    """An export's timestamp as an aware UTC time: ISO 8601 (``Z`` or an offset; BigQuery's `` UTC`` suffix too);
    one without an offset is an error unless ``naive_is_utc`` (an export documented to write UTC)."""
    try:
        at = datetime.fromisoformat(value.replace(" UTC", "+00:00").replace("Z", "+00:00")) if isinstance(
            value, str) else None
    except ValueError:
        at = None
    if at is None or (at.utcoffset() is None and not naive_is_utc):
        raise ExportParseError(where, f"must be an ISO 8601 time{'' if naive_is_utc else ' with an offset'}, "
                                      f"got {value!r}")
    return (at if at.utcoffset() is not None else at.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)


def add_money(money: dict[Any, tuple[Decimal, int | None]], key: tuple, amount: Decimal, tokens: int | None) -> None:
    """Add one line's money and the tokens it bills to ``money[key]`` (None: a line of no token count, so the
    sum has none)."""
    if key not in money:
        money[key] = (amount, tokens)
        return
    total, counted = money[key]
    money[key] = (total + amount, billed_sum(counted, tokens))


def cost_rows(provider: str, account: str, day: date, money: Money, label: str) -> list[CostRow]:
    """The money summed per (model, token type, invoice, currency) as cost rows in a stable order; model ``*``
    (a charge of no model) is None; ``label`` names the invoice in the description ("invoice", "invoice month")."""
    return [CostRow(provider, account, day, None if model == "*" else model, token_type, amount, currency,
                    f"{label} {invoice}" if invoice else None, invoice if label == "invoice" else None,
                    quantity=tokens)
            for (model, token_type, invoice, currency), (amount, tokens) in sorted(money.items(),
                                                                                  key=lambda kv: str(kv[0]))]


def export_files(root: Path, patterns: Iterable[str]) -> list[Path]:
    """Every file under ``root`` matching any of ``patterns`` (globs), in name order; none if it does not exist."""
    if not root.is_dir():
        return [root] if root.is_file() else []
    return sorted({p for pattern in patterns for p in root.glob(pattern) if p.is_file()})


def read_text(path: Path) -> str:
    """A file's text, gunzipped when it ends in ``.gz``."""
    data = path.read_bytes()
    if path.suffix == ".gz":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise ExportParseError(str(path), f"not a readable gzip file ({exc})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ExportParseError(str(path), f"not UTF-8 text ({exc})") from None
