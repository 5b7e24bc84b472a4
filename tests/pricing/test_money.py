from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pricing.money import MICRO, format_money, round_up_micro, to_decimal


def test_rounds_up_to_the_next_micro_unit():
    assert round_up_micro(Decimal("0.2730816")) == 273_082
    assert round_up_micro(Decimal("0.273082")) == 273_082
    assert round_up_micro(Decimal("0.0000000001")) == 1
    assert round_up_micro(Decimal(0)) == 0
    assert round_up_micro(3) == 3 * MICRO


def test_refuses_floats_and_non_finite():
    with pytest.raises(TypeError, match="never float"):
        round_up_micro(0.1)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        round_up_micro(Decimal("NaN"))
    with pytest.raises(ValueError):
        round_up_micro(Decimal("Infinity"))


@given(st.decimals(allow_nan=False, allow_infinity=False, places=9, min_value=-10**6, max_value=10**6))
def test_never_under_states_and_never_overshoots_by_a_whole_micro(amount):
    micro = round_up_micro(amount)
    assert to_decimal(micro) >= amount
    assert to_decimal(micro) - amount < Decimal("0.000001")


def test_format_money_is_exact():
    assert format_money(273_082, "INR") == "₹0.273082"
    assert format_money(12_000_000, "USD") == "$12.000000"
    assert format_money(-1, "EUR") == "-€0.000001"
    assert format_money(1_500_000, "CHF") == "CHF 1.500000"
    assert format_money(10**20 + 1, "USD") == "$100000000000000.000001"


def test_to_decimal_round_trips():
    assert to_decimal(273_082) == Decimal("0.273082")
    assert round_up_micro(to_decimal(987_654_321)) == 987_654_321
    with pytest.raises(TypeError):
        to_decimal(1.5)  # type: ignore[arg-type]


def test_round_up_is_exact_past_28_significant_digits():
    """Decimal.scaleb rounds to the context precision (28 digits by default); rounding must not."""
    from decimal import Decimal

    from pricing.money import round_up_micro, to_decimal

    big = Decimal("123456789012345678901234.0000001")  # 31 digits: one micro-unit fraction at the end
    assert round_up_micro(big) == 123456789012345678901234_000001
    assert round_up_micro(Decimal("-123456789012345678901234.0000009")) == -123456789012345678901234_000000
    assert to_decimal(10**40 + 1) == Decimal("10000000000000000000000000000000000.000001")
