"""Our side of reconciliation: rows of the ``our_usage`` view priced by token type into ``OurUsage``.

``reconcile/sql/our_usage.sql`` gives, per (account, UTC day, model,
deployment, price version, currency, token type), the tokens our attempts
recorded, the estimated part, and the expired requests of (account, day,
model). :func:`our_usage_rows` prices each row with the price version it was
charged under (``pricing``: tokens x price per 1M x FX, exact Decimal), sums
across deployments and versions per (account, day, model, token type), and
rounds once per key with ``pricing.money.round_up_micro``. This is the day's
tokens re-rated at the prices that charged them, so it can differ from the sum
of the per-request charges (each rounded up) by under one micro-unit per
request: far below any drift threshold.

``priced`` is False for a type some deployment used but its price has no
figure of its own for (it was charged at its fallback: cache writes at the
input price); ``price_versions`` holds the versions that priced non-zero tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal, localcontext
from typing import Any

from pricing.book import Price
from pricing.money import round_up_micro
from reconcile.drift import DriftInputError, OurUsage

_PER = Decimal(1_000_000)
_OWN_PRICE_OPTIONAL = ("cached_input", "cache_write", "reasoning")

# (price version, deployment, budget currency, served tier or None) -> (the price, FX from its currency to the
# budget currency): the served tier's price where the version has one (``PriceVersion.served``)
PriceOf = Callable[[int, str, str, str | None], tuple[Price, Decimal]]


@dataclass(slots=True)
class _Acc:
    tokens: int = 0
    estimated: int = 0
    invalid: int = 0
    expired: int = 0
    exact: Decimal = Decimal(0)
    currency: str = ""
    versions: set[int] = field(default_factory=set)
    priced: bool = True


def our_usage_rows(records: Iterable[Mapping[str, Any]], price_of: PriceOf) -> list[OurUsage]:
    """``our_usage`` view rows (mappings by column name) -> one ``OurUsage`` per (account, day, model, type)."""
    acc: dict[tuple[str, date, str, str, str], _Acc] = {}
    for i, rec in enumerate(records):
        key = (rec["account"], rec["day"], rec["model"], rec["token_type"], rec.get("service_tier") or "")
        if any(part is None for part in key):
            raise DriftInputError(f"our_usage row {i}: account, day, model and token_type must be set, got {key[:4]}")
        price, fx = price_of(rec["price_version"], rec["deployment"], rec["currency"], rec.get("service_tier"))
        a = acc.setdefault(key, _Acc(currency=rec["currency"]))
        if a.currency != rec["currency"]:
            raise DriftInputError(f"our_usage row {i}: {key} in both {a.currency} and {rec['currency']}")
        tokens = int(rec["tokens"])
        with localcontext() as ctx:
            ctx.prec = 80  # wide enough that tokens x price x fx is exact
            a.exact += Decimal(tokens) * price.per_million(key[3]) * fx / _PER
        a.tokens += tokens
        a.estimated += int(rec["estimated_tokens"])
        a.invalid += int(rec.get("invalid_tokens") or 0)
        a.expired = max(a.expired, int(rec["expired_requests"]))  # per (account, day, model), repeated
        if tokens:  # a type a deployment never used says nothing about its price or version
            a.versions.add(int(rec["price_version"]))
            if key[3] in _OWN_PRICE_OPTIONAL and getattr(price, key[3]) is None:
                a.priced = False
    return [OurUsage(account, day, model, token_type, a.tokens, a.estimated, a.expired, round_up_micro(a.exact),
                     a.currency, frozenset(a.versions), a.priced, a.invalid, tier or None)
            for (account, day, model, token_type, tier), a in sorted(acc.items())]


def unattributed_expired(records: Iterable[Mapping[str, Any]]) -> dict[date, int]:
    """``our_expired_unattributed`` view rows -> the ``unattributed_expired`` argument of the comparison."""
    return {rec["day"]: int(rec["requests"]) for rec in records}
