from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.usage import TokenUsage
from pricing.book import Price
from pricing.money import to_decimal
from pricing.rating import exact_cost, rate, worst_case

MID = Price(input=Decimal("2"), output=Decimal("10"), cached_input=Decimal("0.20"))
SMALL = Price(input=Decimal("0.10"), output=Decimal("0.50"))


def test_design_doc_example():
    usage = TokenUsage(input=338, cached_input=1536, output=212)
    assert rate(usage, MID, Decimal("88")) == 273_082  # ₹0.27


def test_each_type_priced_with_fallbacks():
    price = Price(input=Decimal(1), output=Decimal(3), cache_write=Decimal("1.25"), reasoning=Decimal(5))
    usage = TokenUsage(input=1_000_000, cached_input=1_000_000, cache_write=1_000_000, output=1_000_000, reasoning=1_000_000)
    # 1 + 1 (cached falls back to input) + 1.25 + 3 + 5
    assert rate(usage, price, Decimal(1)) == 11_250_000


def test_zero_usage_costs_nothing():
    assert rate(TokenUsage(), MID, Decimal("88")) == 0


def test_rounds_once_not_per_type():
    # Each type alone is 0.4 micro; rounding per type would give 2, once gives 1.
    price = Price(input=Decimal("0.4"), output=Decimal("0.4"))
    assert rate(TokenUsage(input=1, output=1), price, Decimal(1)) == 1


def test_fx_must_be_decimal():
    with pytest.raises(ValueError):
        rate(TokenUsage(input=1), MID, 88.0)  # type: ignore[arg-type]


usages = st.builds(
    TokenUsage,
    input=st.integers(0, 10**7),
    cached_input=st.integers(0, 10**7),
    cache_write=st.integers(0, 10**7),
    output=st.integers(0, 10**7),
    reasoning=st.integers(0, 10**7),
)


@given(usages, st.decimals(min_value=Decimal("0.0001"), max_value=Decimal(200), places=4))
def test_rate_is_exact_cost_rounded_up(usage, fx):
    micro = rate(usage, MID, fx)
    exact = exact_cost(usage, MID, fx)
    assert to_decimal(micro) >= exact > to_decimal(micro) - Decimal("0.000001") or (exact == 0 and micro == 0)


@given(usages)
def test_rate_is_reproducible(usage):
    assert rate(usage, MID, Decimal("88")) == rate(usage, MID, Decimal("88"))


def test_worst_case_uses_highest_prices_after_fx():
    inr_price = Price(input=Decimal(150), output=Decimal(400), currency="INR")  # ₹150 / ₹400
    fx = {"USD": Decimal("88"), "INR": Decimal(1)}
    hold = worst_case(1000, 500, [MID, SMALL, inr_price], lambda p: fx[p.currency])
    # input: max(2*88=176, 150) = 176; output: max(10*88=880, 400) = 880
    assert hold == (1000 * 176 + 500 * 880)


def test_worst_case_covers_cache_write_and_reasoning_premiums():
    price = Price(input=Decimal(3), output=Decimal(15), cache_write=Decimal("3.75"), reasoning=Decimal(20))
    assert worst_case(1_000_000, 1_000_000, [price], lambda p: Decimal(1)) == (Decimal("3.75") + 20) * 1_000_000


@given(usages)
def test_worst_case_bounds_any_actual_usage(usage):
    prices = [MID, SMALL]
    hold = worst_case(usage.prompt_tokens, usage.completion_tokens, prices, lambda p: Decimal("88"))
    assert all(rate(usage, p, Decimal("88")) <= hold for p in prices)


def test_worst_case_needs_candidates():
    with pytest.raises(ValueError):
        worst_case(1, 1, [], lambda p: Decimal(1))
