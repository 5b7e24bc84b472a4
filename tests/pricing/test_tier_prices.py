"""A served tier's price: ``price_per_1m.tiers`` in the config, ``{deployment}@{tier}`` in the price version,
used for usage that names the tier and for holds of requests that ask for it."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from pricing.book import Price, PriceVersion
from proxy.control.errors import ConfigRejected
from proxy.control.price_changes import price_table

V = PriceVersion(version=1, valid_from=datetime(2026, 1, 1, tzinfo=UTC),
                 prices={"d": Price(input=Decimal(2), output=Decimal(10)),
                         "d@flex": Price(input=Decimal(1), output=Decimal(5))})


def test_a_tier_with_a_price_is_priced_at_it_and_any_other_at_the_standard_price():
    assert V.served("d", "flex").input == 1
    assert V.served("d", "priority") is V.served("d", None) is V.price("d")


def test_tier_prices_flatten_into_their_own_entries():
    table = price_table({"d": {"currency": "EUR", "input": "2", "output": "10",
                               "tiers": {"flex": {"input": "1", "output": "5"}}}})
    assert table == {"d": {"currency": "EUR", "input": "2", "output": "10"},
                     "d@flex": {"currency": "EUR", "input": "1", "output": "5"}}


@pytest.mark.parametrize("tier", ["Flex", "default", "standard", "a b"])
def test_a_tier_must_be_a_served_tiers_name(tier):
    with pytest.raises(ConfigRejected, match="tiers"):
        price_table({"d": {"input": "2", "output": "10", "tiers": {tier: {"input": "1", "output": "5"}}}})


def test_a_fleets_hourly_price_is_kept_with_its_gpus_and_checked():
    table = price_table({"fleet": {"currency": "USD", "input": "0", "output": "0", "gpu_hour": "2.40", "gpus": 8}})
    assert table == {"fleet": {"currency": "USD", "input": "0", "output": "0", "gpu_hour": "2.40", "gpus": 8}}
    assert Price(**table["fleet"]).per_hour == Decimal("19.20")
    with pytest.raises(ConfigRejected, match="gpu_hour and gpus go together"):
        price_table({"fleet": {"input": "0", "output": "0", "gpu_hour": "2.40"}})
    with pytest.raises(ConfigRejected, match="gpus"):
        price_table({"fleet": {"input": "0", "output": "0", "gpu_hour": "2.40", "gpus": 0}})
    with pytest.raises(ValueError, match="gpus"):
        Price(input=Decimal(0), output=Decimal(0), gpu_hour=Decimal("1"), gpus=True)
