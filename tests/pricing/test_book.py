from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from pricing.book import FxTable, Price, PriceBook, PriceVersion
from pricing.errors import (
    MissingFxRate,
    NoPriceInForce,
    PriceVersionConflict,
    UnknownDeployment,
    UnknownPriceVersion,
)

T0 = datetime(2026, 10, 1, tzinfo=timezone.utc)
MID = Price(input=Decimal("2"), output=Decimal("10"), cached_input=Decimal("0.20"))


def version(n: int, start: datetime, price: Price = MID) -> PriceVersion:
    return PriceVersion(version=n, valid_from=start, prices={"b-mid-mumbai": price})


def test_missing_types_fall_back():
    assert MID.per_million("cached_input") == Decimal("0.20")
    assert MID.per_million("cache_write") == Decimal("2")
    assert MID.per_million("reasoning") == Decimal("10")


def test_price_refuses_floats_and_negative():
    with pytest.raises(TypeError, match="never float"):
        Price(input=2.0, output=Decimal(10))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Price(input=Decimal(-1), output=Decimal(10))
    with pytest.raises(ValueError):
        Price(input=Decimal(1), output=Decimal(1), currency="usd")
    assert Price(input="2.00", output=10).input == Decimal("2.00")  # type: ignore[arg-type]


def test_in_force_picks_latest_valid_version():
    book = PriceBook().add(version(1, T0)).add(version(2, T0 + timedelta(days=10)))
    assert book.in_force(T0).version == 1
    assert book.in_force(T0 + timedelta(days=9, hours=23)).version == 1
    assert book.in_force(T0 + timedelta(days=10)).version == 2
    assert book.in_force(T0 + timedelta(days=400)).version == 2
    with pytest.raises(NoPriceInForce):
        book.in_force(T0 - timedelta(seconds=1))
    # Any timezone is an instant; it is compared in UTC.
    ist = timezone(timedelta(hours=5, minutes=30))
    assert book.in_force(datetime(2026, 10, 11, 5, 30, tzinfo=ist)).version == 2


def test_versions_are_never_edited():
    book = PriceBook().add(version(1, T0))
    edited = version(1, T0, Price(input=Decimal("3"), output=Decimal("10")))
    with pytest.raises(PriceVersionConflict, match="never edited"):
        book.add(edited)
    assert book.add(version(1, T0)) is book  # identical re-add (replay) is a no-op


def test_versions_and_valid_from_must_increase():
    book = PriceBook().add(version(5, T0))
    with pytest.raises(PriceVersionConflict):
        book.add(version(4, T0 + timedelta(days=1)))
    with pytest.raises(PriceVersionConflict):
        book.add(version(6, T0))
    with pytest.raises(PriceVersionConflict):
        PriceBook((version(2, T0), version(1, T0 + timedelta(days=1))))


def test_add_returns_a_new_book_and_leaves_the_old_one():
    old = PriceBook().add(version(1, T0))
    new = old.add(version(2, T0 + timedelta(days=1)))
    assert [v.version for v in old.versions] == [1]
    assert [v.version for v in new.versions] == [1, 2]


def test_get_and_unknown_lookups():
    book = PriceBook.of([version(17, T0)])
    assert book.get(17).price("b-mid-mumbai") is MID
    assert book.latest.version == 17
    with pytest.raises(UnknownPriceVersion):
        book.get(16)
    with pytest.raises(UnknownDeployment):
        book.get(17).price("nope")


def test_valid_from_must_be_aware():
    with pytest.raises(ValueError, match="timezone-aware"):
        PriceVersion(version=1, valid_from=datetime(2026, 1, 1), prices={})


def test_price_version_prices_are_read_only():
    v = version(1, T0)
    with pytest.raises(TypeError):
        v.prices["x"] = MID  # type: ignore[index]


def test_fx_table():
    fx = FxTable({("USD", "INR", "2026-10"): Decimal("88")})
    assert fx.rate("USD", "INR", T0 + timedelta(days=30, hours=23)) == Decimal("88")
    assert fx.rate("INR", "INR", T0) == Decimal(1)
    with pytest.raises(MissingFxRate, match="USD->INR for 2026-11"):
        fx.rate("USD", "INR", T0 + timedelta(days=31))
    with pytest.raises(MissingFxRate):
        fx.rate("INR", "USD", T0)
    assert fx.with_rate("USD", "INR", "2026-11", Decimal("89")).rate("USD", "INR", datetime(2026, 11, 2, tzinfo=timezone.utc)) == 89
    with pytest.raises(PriceVersionConflict):
        fx.with_rate("USD", "INR", "2026-10", Decimal("90"))
    with pytest.raises(ValueError):
        FxTable({("USD", "INR", "2026-13"): Decimal("88")})
    with pytest.raises(TypeError):
        FxTable({("USD", "INR", "2026-10"): 88.0})  # type: ignore[dict-item]
