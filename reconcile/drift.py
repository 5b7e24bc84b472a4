"""The pure comparison of a provider's usage export with our own records: tokens and money.

Inputs: the provider's rows (``reconcile.exports.UsageRow`` / ``CostRow``) and
ours (:class:`OurUsage`, one row per account, UTC day, model and token type,
built from the archive by ``reconcile/sql/our_usage.sql``). Output: one
:class:`DriftRow` per key either side reports, with the provider's figure,
ours, ``difference = provider - ours`` and ``percent = difference / provider
* 100`` (None when the provider reports nothing); a row is flagged when
``|percent|`` exceeds the threshold (1% by default) or the provider reports
nothing where we do; a money row whose difference is within one smallest unit
of its currency (a cent of USD) is never flagged, whatever the percentage (the
two sides round differently). Every flagged row names at least one cause
(:class:`Cause`): the likely causes found in our own data (usage estimated
rather than provider-reported, a provider's invalid usage, a token type farebox
never priced, requests whose hold expired, a price version mismatch), a tier
the provider billed otherwise, a price mismatch (the provider's billed quantity
agrees with our tokens, the money does not), or, when
our data shows none, the direction itself (``provider_reports_more``: they
count more than we recorded; ``provider_reports_less``; ``missing_rows``: one
side has no row at all).

Rules a reader must keep:

* only the accounts the provider rows cover are compared (pass ``accounts``
  to cover an account whose export came back empty);
* a provider that reports no ``reasoning`` row for an (account, day, model)
  counts reasoning inside output (OpenAI, Anthropic): our ``reasoning`` is
  folded into our ``output`` for that group before comparing, tokens and money;
* a provider row with model ``"*"`` (a report not grouped by model) is set
  against ours summed over every model of that account and day;
* a provider cost row is set against ours summed over every row matching its
  non-None parts (model, token type); one report is expected to use one grain;
* money is compared in the provider's currency; ours in another currency is
  a :class:`DriftInputError` (convert with ``pricing`` FX first), never a guess.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import date
from decimal import Decimal
from typing import Literal

from reconcile.drift_causes import Cause, Key, direction, listing, order, price_causes, tier_causes, usage_causes
from reconcile.errors import InputError
from reconcile.exports.rows import CostRow, UsageRow, billed_sum, smallest_unit

__all__ = ["Cause", "DriftInputError", "DriftRow", "OurUsage", "compare_money", "compare_tokens"]

DEFAULT_THRESHOLD = Decimal("1")  # percent
ANY_MODEL = "*"
_HUNDRED = Decimal(100)


class DriftInputError(InputError):
    """Our rows or the provider's cannot be compared as given (duplicate key, currency mismatch)."""


@dataclass(frozen=True, slots=True)
class OurUsage:
    """Our aggregate for one (account, day, model, token type), from the archive's attempted events.

    ``estimated_tokens`` is the part of ``tokens`` whose usage source was
    ``estimated`` or ``provider_invalid`` (``invalid_tokens``: the latter part, where
    the provider reported usage that failed the boundary); ``expired_requests`` counts requests of this (account, day,
    model) whose hold expired, repeated on each of its token-type rows;
    ``cost_micro`` is what we charged for these tokens in ``currency``;
    ``price_versions`` the versions that priced them; ``priced`` is False when
    the deployment's price book has no price of its own for the type.
    """

    account: str
    day: date
    model: str
    token_type: str
    tokens: int
    estimated_tokens: int = 0
    expired_requests: int = 0
    cost_micro: int = 0
    currency: str = "USD"
    price_versions: frozenset[int] = field(default_factory=frozenset)
    priced: bool = True
    invalid_tokens: int = 0
    tier: str | None = None  # the service tier the provider served these at (None: standard)

    def __post_init__(self) -> None:
        object.__setattr__(self, "price_versions", frozenset(self.price_versions))
        for name in ("tokens", "estimated_tokens", "expired_requests", "cost_micro", "invalid_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise DriftInputError(f"{self._key()}: {name} must be a non-negative integer, got {value!r}")
        if self.estimated_tokens > self.tokens:
            raise DriftInputError(f"{self._key()}: estimated_tokens {self.estimated_tokens} > tokens {self.tokens}")
        if self.invalid_tokens > self.estimated_tokens:
            raise DriftInputError(f"{self._key()}: invalid_tokens {self.invalid_tokens} > estimated_tokens "
                                  f"{self.estimated_tokens}")

    def _key(self) -> str:
        return f"{self.account}/{self.day}/{self.model}/{self.token_type}"


@dataclass(frozen=True, slots=True)
class DriftRow:
    """One compared key; money figures are in currency units of ``currency``, token figures are counts."""

    measure: Literal["tokens", "money"]
    provider: str
    account: str
    day: date
    model: str | None
    token_type: str | None
    provider_figure: Decimal
    ours: Decimal
    difference: Decimal
    percent: Decimal | None
    flagged: bool
    causes: tuple[Cause, ...] = ()
    currency: str | None = None
    tier: str | None = None  # the service tier compared, where the provider reports by tier

    def to_dict(self) -> dict[str, object]:
        """JSON-safe form for reports: Decimals as exact strings, the day as ``YYYY-MM-DD``."""
        return {"measure": self.measure, "provider": self.provider, "account": self.account,
                "day": self.day.isoformat(), "model": self.model, "token_type": self.token_type,
                "provider_figure": str(self.provider_figure), "ours": str(self.ours),
                "difference": str(self.difference),
                "percent": None if self.percent is None else str(self.percent.quantize(Decimal("0.01"))),
                "flagged": self.flagged, "causes": [{"code": c.code, "detail": c.detail} for c in self.causes],
                "currency": self.currency, "tier": self.tier}


STANDARD = "standard"


def compare_tokens(provider_rows: Iterable[UsageRow], ours: Iterable[OurUsage], *,
                   threshold: Decimal = DEFAULT_THRESHOLD, accounts: Iterable[str] | None = None,
                   unattributed_expired: Mapping[date, int] | None = None) -> list[DriftRow]:
    """Token drift per (account, day, model, token type), sorted by key.

    ``unattributed_expired`` counts, per day, expired requests that never
    recorded an attempt (so no account or model is known); they are named as
    a cause on every flagged row of that day where the provider counts more.
    """
    theirs: dict[Key, int] = {}
    provider_of: dict[str, str] = {}
    reported: dict[tuple[str, date, str], set[str]] = {}
    rows_in = list(provider_rows)
    tiered = {(u.account, u.day, u.model) for u in rows_in if u.tier is not None}
    for usage in rows_in:
        tier = (usage.tier or STANDARD) if (usage.account, usage.day, usage.model) in tiered else None
        key = (usage.account, usage.day, usage.model, usage.token_type, tier)
        theirs[key] = theirs.get(key, 0) + usage.tokens
        provider_of.setdefault(usage.account, usage.provider)
        reported.setdefault((usage.account, usage.day, usage.model), set()).add(usage.token_type)
    scope = set(provider_of) | set(accounts or ())
    mine = _fold_to_provider_grain({k: r for k, r in _index(ours).items() if r.account in scope}, reported, tiered)
    rows = []
    for key in sorted(set(theirs) | set(mine), key=order):
        our = mine.get(key)
        p, o = Decimal(theirs.get(key, 0)), Decimal(our.tokens if our else 0)
        if not p and not o:
            continue
        row = _drift("tokens", provider_of.get(key[0], ""), key, p, o, threshold)
        if row.flagged:
            causes = tier_causes(key, theirs, {k: Decimal(r.tokens) for k, r in mine.items()}, threshold, "tokens")
            causes += usage_causes(key, [our] if our else [], p > o, unattributed_expired or {})
            row = replace(row, causes=tuple(causes) or (direction(row, "tokens"),))
        rows.append(row)
    return rows


def compare_money(provider_costs: Iterable[CostRow], ours: Iterable[OurUsage], *,
                  threshold: Decimal = DEFAULT_THRESHOLD, accounts: Iterable[str] | None = None,
                  current_price_version: int | None = None,
                  unattributed_expired: Mapping[date, int] | None = None) -> list[DriftRow]:
    """Money drift at the grain of the provider's cost rows, plus our charges no provider row covers.

    ``current_price_version``, when given, is the version that should have
    priced the day; rows priced under any other are named as a cause.
    """
    theirs: dict[tuple[str, date, str | None, str | None, str | None], tuple[Decimal, str, int | None]] = {}
    provider_of: dict[str, str] = {}
    costs = list(provider_costs)
    tiered = {(c.account, c.day, c.model) for c in costs if c.tier is not None and c.model is not None}
    for cost in costs:
        tier = (cost.tier or STANDARD) if (cost.account, cost.day, cost.model) in tiered else None
        key = (cost.account, cost.day, cost.model, cost.token_type, tier)
        amount, currency, billed = theirs.get(key, (Decimal(0), cost.currency, 0))
        if currency != cost.currency:
            raise DriftInputError(f"{key}: provider rows in both {currency} and {cost.currency}")
        theirs[key] = (amount + cost.amount, currency, billed_sum(billed, cost.quantity))
        provider_of.setdefault(cost.account, cost.provider)
    scope = set(provider_of) | set(accounts or ())
    typed: dict[tuple[str, date, str], set[str]] = {}
    for account, day, model, token_type, _ in theirs:
        if model is not None and token_type is not None:
            typed.setdefault((account, day, model), set()).add(token_type)
    mine = list(_fold_to_provider_grain({k: r for k, r in _index(ours).items() if r.account in scope},
                                        typed, tiered).values())
    covered: set[Key] = set()
    rows = []
    for key, (amount, currency, billed) in theirs.items():
        matched = [r for r in mine if _covers(key, r)]
        covered.update(_key_of(r) for r in matched)
        rows.append(_money_row(provider_of[key[0]], key, amount, currency, matched, threshold,
                               current_price_version, unattributed_expired or {}, billed))
    for r in mine:
        if _key_of(r) not in covered and r.cost_micro:
            rows.append(_money_row(provider_of.get(r.account, ""), _key_of(r), Decimal(0), r.currency, [r], threshold,
                                   current_price_version, unattributed_expired or {}, None))
    return sorted(rows, key=lambda d: (d.account, d.day, d.model or "", d.token_type or "", d.tier or ""))


def _key_of(r: OurUsage) -> Key:
    return (r.account, r.day, r.model, r.token_type, r.tier)


def _index(ours: Iterable[OurUsage]) -> dict[Key, OurUsage]:
    out: dict[Key, OurUsage] = {}
    for r in ours:
        key = _key_of(r)
        if key in out:
            raise DriftInputError(f"our rows repeat the key {r._key()}{'@' + r.tier if r.tier else ''}: aggregate "
                                  "them first")
        out[key] = r
    return out


def _fold_to_provider_grain(mine: dict[Key, OurUsage], reported: Mapping[tuple[str, date, str], set[str]],
                            tiered: set[tuple[str, date, str]] = frozenset()) -> dict[Key, OurUsage]:
    """Collapse ours to model ``*`` where the provider did not group by model; fold reasoning into output; keep
    our tiers (standard when we record none) where the provider reports by tier, else sum over tiers."""
    ungrouped = {(acct, day) for acct, day, model in reported if model == ANY_MODEL}
    out: dict[Key, OurUsage] = {}
    for (acct, day, model, token_type, tier), r in mine.items():
        model = ANY_MODEL if (acct, day) in ungrouped else model
        types = reported.get((acct, day, model))
        if token_type == "reasoning" and types is not None and "reasoning" not in types:
            token_type = "output"
        tier = (tier or STANDARD) if (acct, day, model) in tiered else None
        key = (acct, day, model, token_type, tier)
        out[key] = _merge(out[key], r, model, token_type, tier) if key in out else replace(
            r, model=model, token_type=token_type, tier=tier)
    return out


def _merge(a: OurUsage, b: OurUsage, model: str, token_type: str, tier: str | None) -> OurUsage:
    if a.currency != b.currency:
        raise DriftInputError(f"{a._key()}: our rows in both {a.currency} and {b.currency}")
    same_group = a.model == b.model  # the expired count is per (account, day, model): add it once per model
    return OurUsage(a.account, a.day, model, token_type, a.tokens + b.tokens,
                    a.estimated_tokens + b.estimated_tokens,
                    max(a.expired_requests, b.expired_requests) if same_group else a.expired_requests + b.expired_requests,
                    a.cost_micro + b.cost_micro, a.currency, a.price_versions | b.price_versions, a.priced and b.priced,
                    a.invalid_tokens + b.invalid_tokens, tier)


def _covers(key: tuple[str, date, str | None, str | None, str | None], r: OurUsage) -> bool:
    account, day, model, token_type, tier = key
    return (r.account == account and r.day == day and (model is None or model == r.model)
            and (token_type is None or token_type == r.token_type) and (tier is None or tier == r.tier))


def _drift(measure: Literal["tokens", "money"], provider: str, key: tuple[str, date, str | None, str | None, str | None],
           p: Decimal, o: Decimal, threshold: Decimal, currency: str | None = None) -> DriftRow:
    difference = p - o
    percent = difference / p * _HUNDRED if p else None
    flagged = abs(percent) > threshold if percent is not None else o != 0
    if measure == "money" and currency is not None and abs(difference) <= smallest_unit(currency):
        flagged = False  # within one lowest unit of the currency: rounding, not drift
    return DriftRow(measure, provider, key[0], key[1], key[2], key[3], p, o, difference, percent, flagged,
                    currency=currency, tier=key[4])


def _money_row(provider: str, key: tuple[str, date, str | None, str | None, str | None], amount: Decimal, currency: str,
               matched: list[OurUsage], threshold: Decimal, current: int | None,
               unattributed: Mapping[date, int], billed_tokens: int | None) -> DriftRow:
    for r in matched:
        if r.currency != currency:
            raise DriftInputError(f"{r._key()}: ours in {r.currency}, the provider's in {currency}; convert first")
    ours = Decimal(sum(r.cost_micro for r in matched)).scaleb(-6)
    row = _drift("money", provider, key, amount, ours, threshold, currency)
    if not row.flagged:
        return row
    causes = price_causes(key, billed_tokens, amount, matched, currency, threshold)
    causes += usage_causes(key, matched, amount > ours, unattributed)
    versions = frozenset().union(*(r.price_versions for r in matched)) if matched else frozenset()
    if current is not None and versions - {current}:
        causes.append(Cause("price_version_mismatch", f"priced under version(s) {listing(versions)}; "
                                                       f"version {current} is in force"))
    elif current is None and len(versions) > 1:
        causes.append(Cause("price_version_mismatch", f"priced under several versions: {listing(versions)}"))
    return replace(row, causes=tuple(causes) or (direction(row, currency),))


