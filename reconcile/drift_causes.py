"""Why a drift row is off: the causes named on every flagged row (see ``reconcile.drift``).

Each cause is found in the rows themselves: our own data (estimated usage, a
provider's invalid usage, unpriced types, expired holds), the provider's tiers
(``tier_mismatch``: the usage is there, billed at another tier), the provider's
billed quantity (``price_mismatch``: the tokens agree, the money does not, so
the rate differs), or, when nothing else shows, the direction of the difference
(``provider_reports_more`` / ``provider_reports_less`` / ``missing_rows``), so
no flagged row is ever left without one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Literal, Protocol

from reconcile.exports.rows import PRICED_TYPES


class Ours(Protocol):
    """What the causes read of ``reconcile.drift.OurUsage`` (by shape: drift imports this module)."""

    model: str
    token_type: str
    tokens: int
    estimated_tokens: int
    invalid_tokens: int
    expired_requests: int
    cost_micro: int
    priced: bool


class Compared(Protocol):
    """What ``direction`` reads of a ``reconcile.drift.DriftRow``."""

    measure: str
    provider_figure: Decimal
    ours: Decimal
    difference: Decimal

Key = tuple[str, date, str, str, str | None]  # account, day, model, token type, tier (None: not reported by tier)
_HUNDRED = Decimal(100)
_MILLION = Decimal(1_000_000)


@dataclass(frozen=True, slots=True)
class Cause:
    """A likely cause of a flagged row: ``code`` for machines, ``detail`` with our figures for people."""

    code: Literal["estimated_usage", "provider_invalid_usage", "unpriced_token_type", "expired_holds",
                  "price_version_mismatch", "provider_reports_more", "provider_reports_less", "missing_rows",
                  "tier_mismatch", "price_mismatch"]
    detail: str


def tier_causes(key: Key, theirs: Mapping[Key, object], ours: Mapping[Key, Decimal], threshold: Decimal,
                 unit: str) -> list[Cause]:
    """``tier_mismatch`` when a per-tier row is off but the same account, day, model and type agree over every
    tier: the usage is there, billed at another tier than we recorded."""
    if key[4] is None:
        return []
    same = [k for k in {*theirs, *ours} if k[:4] == key[:4]]
    p = sum(Decimal(_figure(theirs[k])) for k in same if k in theirs)
    o = sum(ours.get(k, Decimal(0)) for k in same)
    if not p or abs((p - o) / p * _HUNDRED) > threshold:
        return []
    by_tier = ", ".join(f"{k[4]}: {_figure(theirs.get(k, 0))} against our {ours.get(k, 0)}" for k in
                        sorted(same, key=order))
    return [Cause("tier_mismatch", f"over every tier the {unit} agree ({p} against our {o}); by tier {by_tier}")]


def order(key: Key) -> tuple:
    """A key's sort order (a None tier sorts first)."""
    return (*key[:4], key[4] or "")


def _figure(value: object) -> Decimal:
    return value[0] if isinstance(value, tuple) else Decimal(value)  # type: ignore[arg-type,index]


def direction(row: Compared, unit: str) -> Cause:
    """The flagged row's direction, its cause when our data shows no other (so no flagged row is without one)."""
    what = "tokens" if row.measure == "tokens" else "money"
    if not row.provider_figure or not row.ours:
        side = "the provider reports none" if not row.provider_figure else "we recorded none"
        return Cause("missing_rows", f"{side} of this {what} where the other side has "
                                     f"{row.ours if row.ours else row.provider_figure}")
    if row.difference > 0:
        return Cause("provider_reports_more", f"the provider reports {abs(row.difference)} {unit} more than we "
                                              f"recorded ({row.provider_figure} against {row.ours})")
    return Cause("provider_reports_less", f"the provider reports {abs(row.difference)} {unit} less than we recorded "
                                          f"({row.provider_figure} against {row.ours}): usage we billed that they "
                                          f"do not, or an under-report on their side")


def usage_causes(key: tuple[str, date, str | None, str | None, str | None], matched: list[Ours], provider_more: bool,
                  unattributed: Mapping[date, int]) -> list[Cause]:
    """Causes visible in our own rows: estimated share, unpriced type, expired holds.

    Expired holds lose usage, so they are named only where the provider counts more than we do."""
    causes: list[Cause] = []
    tokens = sum(r.tokens for r in matched)
    estimated = sum(r.estimated_tokens for r in matched)
    if estimated:
        share = Decimal(estimated) / Decimal(tokens) * _HUNDRED
        causes.append(Cause("estimated_usage", f"{pct(share)}% of our {tokens} tokens ({estimated}) were "
                                               "estimated, not provider-reported"))
    invalid = sum(r.invalid_tokens for r in matched)
    if invalid:
        causes.append(Cause("provider_invalid_usage", f"{invalid} of them replace usage the provider reported "
                                                      "invalidly (negative, non-integer or beyond the request's "
                                                      "bound; each attempt's usage_received says what it sent)"))
    token_type = key[3]
    unpriced = [r.token_type for r in matched if not r.priced]
    if token_type is not None and token_type not in PRICED_TYPES:
        causes.append(Cause("unpriced_token_type", f"the provider billed {token_type!r}, a type farebox never "
                                                   "prices or records"))
    elif unpriced:
        causes.append(Cause("unpriced_token_type", f"{listing(unpriced)} had no price of its own in our price book"))
    expired = sum({r.model: r.expired_requests for r in matched}.values())  # repeated per token type
    if expired and provider_more:
        causes.append(Cause("expired_holds", f"{expired} request(s) here expired before settling (pod died); "
                                             "usage after the pod died is not in our figures"))
    loose = unattributed.get(key[1], 0)
    if loose and provider_more:
        causes.append(Cause("expired_holds", f"{loose} request(s) that day expired before any attempt was "
                                             "recorded; their account and model are unknown to us"))
    return causes


def pct(value: Decimal) -> str:
    return str(value.quantize(Decimal("0.01")))


def listing(values: Iterable[object]) -> str:
    return ", ".join(str(v) for v in sorted(values))  # type: ignore[type-var]


def price_causes(key: tuple[str, date, str | None, str | None, str | None], billed_tokens: int | None,
                 amount: Decimal, matched: list[Ours], currency: str, threshold: Decimal) -> list[Cause]:
    """``price_mismatch`` when the provider says how many tokens the money bills and they agree with ours (within
    the threshold): the difference is then the rate, given per million tokens on both sides."""
    if billed_tokens is None or key[3] is None or key[3] not in PRICED_TYPES or not billed_tokens:
        return []
    tokens = sum(r.tokens for r in matched)
    if abs(Decimal(billed_tokens - tokens)) / Decimal(billed_tokens) * _HUNDRED > threshold or not tokens:
        return []
    theirs = amount / billed_tokens * _MILLION
    ours = Decimal(sum(r.cost_micro for r in matched)).scaleb(-6) / tokens * _MILLION
    return [Cause("price_mismatch", f"the tokens agree ({billed_tokens} billed against our {tokens}); the provider "
                                    f"charged {_rate(theirs)} {currency} per 1M against our price book's "
                                    f"{_rate(ours)}")]


def _rate(value: Decimal) -> str:
    return f"{value.quantize(Decimal('0.000001')).normalize():f}"

