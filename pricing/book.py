"""Versioned price books and the FX table.

Prices are rows with a ``valid_from`` that are never edited: a correction is
a new version, and every priced event carries the version it used so
re-rating reproduces (or deliberately corrects) it exactly. Both the book and
the FX table are immutable values, so a config snapshot can hold them and be
swapped with one pointer change.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal
from types import MappingProxyType

from pricing.errors import (
    MissingFxRate,
    NoPriceInForce,
    PriceVersionConflict,
    UnknownDeployment,
    UnknownPriceVersion,
)

_CURRENCY = re.compile(r"^[A-Z]{3}$")
_MONTH = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")

# Which priced type falls back to which when a deployment has no own price (followed until one is set:
# cache_write_1h -> cache_write -> input).
_FALLBACK = {"cached_input": "input", "cache_write": "input", "reasoning": "output", "cache_write_1h": "cache_write"}
PRICED_TYPES = ("input", "output", "cached_input", "cache_write", "reasoning", "cache_write_1h")


def to_price_decimal(value: object, what: str) -> Decimal:
    """Accept Decimal, int or a numeric string; refuse floats and bad values loudly."""
    if isinstance(value, bool) or isinstance(value, float):
        raise TypeError(f"{what} must be Decimal, int or str, never {type(value).__name__} ({value!r})")
    if isinstance(value, (int, str)):
        try:
            value = Decimal(value)
        except ArithmeticError as exc:
            raise ValueError(f"{what} is not a number: {value!r}") from exc
    if not isinstance(value, Decimal):
        raise TypeError(f"{what} must be Decimal, int or str, got {type(value).__name__}")
    if not value.is_finite() or value < 0:
        raise ValueError(f"{what} must be a finite, non-negative amount, got {value}")
    return value


def check_currency(currency: str) -> str:
    if not isinstance(currency, str) or not _CURRENCY.match(currency):
        raise ValueError(f"currency must be an ISO 4217 code like 'USD', got {currency!r}")
    return currency


def _utc(at: datetime, what: str) -> datetime:
    if at.__class__ is datetime and at.tzinfo is timezone.utc:
        return at  # already UTC: the hot path's times are
    if not isinstance(at, datetime) or at.tzinfo is None or at.utcoffset() is None:
        raise ValueError(f"{what} must be a timezone-aware datetime, got {at!r}")
    return at.astimezone(timezone.utc)


@dataclass(frozen=True, slots=True)
class Price:
    """Prices per 1M tokens of one deployment; a missing type costs what it falls back to."""

    input: Decimal
    output: Decimal
    cached_input: Decimal | None = None
    cache_write: Decimal | None = None
    reasoning: Decimal | None = None
    currency: str = "USD"
    cache_write_1h: Decimal | None = None  # one-hour cache writes (Anthropic); else the cache_write price
    # A fleet paid by the hour (self-hosted GPUs): ``gpus`` x ``gpu_hour`` every hour this price is in force, a
    # flat cost the finance side attributes to the requests it served by their tokens (``reconcile.fleet``);
    # the token prices above are then its marginal cost (often 0), all the gateway holds and charges.
    gpu_hour: Decimal | None = None
    gpus: int | None = None
    # Provisioned capacity (a reservation): ``reserved_hour`` every hour, or ``reserved_month`` spread exactly over
    # the hours of each UTC month, a flat charge to ``reserved_team`` whether used or not (``reconcile.reserved``);
    # the token prices above are its marginal cost (0 for a reservation paid in full).
    reserved_hour: Decimal | None = None
    reserved_month: Decimal | None = None
    reserved_team: str | None = None

    def __post_init__(self) -> None:
        for name in PRICED_TYPES:
            value = getattr(self, name)
            if value is not None or name in ("input", "output"):
                object.__setattr__(self, name, to_price_decimal(value, f"price.{name}"))
        check_currency(self.currency)
        if (self.gpu_hour is None) != (self.gpus is None):
            raise ValueError("price.gpu_hour and price.gpus go together: the price of one GPU-hour and how many")
        if self.gpu_hour is not None:
            object.__setattr__(self, "gpu_hour", to_price_decimal(self.gpu_hour, "price.gpu_hour"))
            if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or self.gpus < 1:
                raise ValueError(f"price.gpus must be a whole number of GPUs >= 1, got {self.gpus!r}")
        self._check_reservation()

    def _check_reservation(self) -> None:
        if self.reserved_hour is not None and self.reserved_month is not None:
            raise ValueError("price.reserved_hour and price.reserved_month: a reservation has one of them, not both")
        reserved = self.reserved_hour is not None or self.reserved_month is not None
        if reserved != (self.reserved_team is not None):
            raise ValueError("price.reserved_hour (or reserved_month) and price.reserved_team go together: the "
                             "reservation's price and the team it is charged to")
        if reserved and self.gpu_hour is not None:
            raise ValueError("price.gpu_hour and a reservation: a deployment is paid by the GPU-hour or reserved, "
                             "not both")
        for name in ("reserved_hour", "reserved_month"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, to_price_decimal(getattr(self, name), f"price.{name}"))
        if reserved and (not isinstance(self.reserved_team, str) or not self.reserved_team.strip()):
            raise ValueError(f"price.reserved_team must name a team, got {self.reserved_team!r}")

    @property
    def per_hour(self) -> Decimal | None:
        """What the fleet costs an hour, in ``currency`` (None: not paid by the hour)."""
        return None if self.gpu_hour is None or self.gpus is None else self.gpu_hour * self.gpus

    @property
    def reserved(self) -> bool:
        """Whether this is provisioned capacity charged flat to ``reserved_team``."""
        return self.reserved_team is not None

    def per_million(self, token_type: str) -> Decimal:
        """The effective price per 1M tokens of a type, after fallbacks."""
        value = getattr(self, token_type)
        while value is None:
            token_type = _FALLBACK[token_type]
            value = getattr(self, token_type)
        return value


TIER_SEP = "@"  # a service tier's price is kept under "{deployment}@{tier}" beside the deployment's own


def tier_key(deployment: str, tier: str) -> str:
    return f"{deployment}{TIER_SEP}{tier}"


@dataclass(frozen=True, slots=True)
class PriceVersion:
    """One immutable price table: prices by deployment id, valid from a UTC instant."""

    version: int
    valid_from: datetime
    prices: Mapping[str, Price]

    def __post_init__(self) -> None:
        if isinstance(self.version, bool) or not isinstance(self.version, int) or self.version < 1:
            raise ValueError(f"price version must be a positive int, got {self.version!r}")
        object.__setattr__(self, "valid_from", _utc(self.valid_from, "valid_from"))
        for deployment, price in self.prices.items():
            if not isinstance(price, Price):
                raise TypeError(f"price of {deployment!r} must be a Price, got {type(price).__name__}")
        object.__setattr__(self, "prices", MappingProxyType(dict(self.prices)))

    def price(self, deployment: str) -> Price:
        try:
            return self.prices[deployment]
        except KeyError:
            raise UnknownDeployment(
                f"price version {self.version} has no price for deployment {deployment!r}"
            ) from None

    def served_key(self, deployment: str, tier: str | None) -> str:
        """The entry what ``deployment`` served at ``tier`` is priced at: ``{deployment}@{tier}`` when the version
        has it, else the deployment's own (standard) entry."""
        if tier:
            key = tier_key(deployment, tier)
            if key in self.prices:
                return key
        return deployment

    def served(self, deployment: str, tier: str | None) -> Price:
        """The price of what ``deployment`` served at ``tier`` (``served_key``)."""
        return self.price(self.served_key(deployment, tier))



@dataclass(frozen=True, slots=True)
class PriceBook:
    """Price versions ordered by version and valid_from; ``add`` returns a new book."""

    versions: tuple[PriceVersion, ...] = ()
    _starts: tuple[datetime, ...] = field(init=False, repr=False, compare=False)
    _by_number: Mapping[int, PriceVersion] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        versions = tuple(self.versions)
        for before, after in zip(versions, versions[1:]):
            _check_follows(before, after)
        object.__setattr__(self, "versions", versions)
        object.__setattr__(self, "_starts", tuple(v.valid_from for v in versions))
        object.__setattr__(self, "_by_number", MappingProxyType({v.version: v for v in versions}))

    @classmethod
    def of(cls, versions: Iterable[PriceVersion]) -> "PriceBook":
        return cls(tuple(versions))

    def add(self, version: PriceVersion) -> "PriceBook":
        """A new book with ``version`` appended; re-adding an identical version is a no-op."""
        existing = self._by_number.get(version.version)
        if existing is not None:
            if existing == version:
                return self
            raise PriceVersionConflict(
                f"price version {version.version} already exists and is never edited; "
                "publish the correction as a new version"
            )
        if self.versions:
            _check_follows(self.versions[-1], version)
        return PriceBook((*self.versions, version))

    def get(self, version: int) -> PriceVersion:
        try:
            return self._by_number[version]
        except KeyError:
            raise UnknownPriceVersion(f"no price version {version} in the book") from None

    def in_force(self, at: datetime) -> PriceVersion:
        """The version valid at ``at``: the latest whose valid_from <= at."""
        at = _utc(at, "at")
        index = bisect.bisect_right(self._starts, at)
        if index == 0:
            raise NoPriceInForce(f"no price version is valid at {at.isoformat()}")
        return self.versions[index - 1]

    @property
    def latest(self) -> PriceVersion:
        if not self.versions:
            raise NoPriceInForce("the price book is empty")
        return self.versions[-1]


def _check_follows(before: PriceVersion, after: PriceVersion) -> None:
    if after.version <= before.version:
        raise PriceVersionConflict(
            f"price version {after.version} must be greater than the last version {before.version}"
        )
    if after.valid_from <= before.valid_from:
        raise PriceVersionConflict(
            f"price version {after.version} valid_from {after.valid_from.isoformat()} must be after "
            f"version {before.version}'s {before.valid_from.isoformat()}; history is not rewritten"
        )


@dataclass(frozen=True, slots=True)
class FxTable:
    """Exchange rates fixed per calendar month: ``{(from, to, "YYYY-MM"): Decimal}``.

    Inverse rates are not derived (1/88 is not exact); add both directions if needed.
    """

    rates: Mapping[tuple[str, str, str], Decimal] = field(default_factory=dict)

    def __post_init__(self) -> None:
        checked: dict[tuple[str, str, str], Decimal] = {}
        for (src, dst, month), value in self.rates.items():
            check_currency(src)
            check_currency(dst)
            if not isinstance(month, str) or not _MONTH.match(month):
                raise ValueError(f"FX month must look like 'YYYY-MM', got {month!r}")
            rate = to_price_decimal(value, f"FX rate {src}->{dst} {month}")
            if rate == 0:
                raise ValueError(f"FX rate {src}->{dst} {month} must be positive")
            checked[(src, dst, month)] = rate
        object.__setattr__(self, "rates", MappingProxyType(checked))

    def with_rate(self, from_ccy: str, to_ccy: str, month: str, rate: Decimal) -> "FxTable":
        key = (from_ccy, to_ccy, month)
        if key in self.rates and self.rates[key] != Decimal(rate):
            raise PriceVersionConflict(f"FX rate {from_ccy}->{to_ccy} {month} is already fixed")
        return FxTable({**self.rates, key: rate})

    def rate(self, from_ccy: str, to_ccy: str, at: datetime) -> Decimal:
        """Units of ``to_ccy`` per unit of ``from_ccy`` in the month of ``at`` (UTC)."""
        if from_ccy == to_ccy:
            return Decimal(1)
        utc = _utc(at, "at")
        month = f"{utc.year:04d}-{utc.month:02d}"  # (strftime took most of this method's time)
        try:
            return self.rates[(from_ccy, to_ccy, month)]
        except KeyError:
            raise MissingFxRate(
                f"no FX rate {from_ccy}->{to_ccy} for {month}; add it to the FX table"
            ) from None
