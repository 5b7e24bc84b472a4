"""Money: integer micro-units everywhere, and the one rounding function.

Events and balances carry integer micro-units of the budget currency
(1 unit = ``MICRO`` micro-units). Prices and intermediate arithmetic are
``Decimal``. ``round_up_micro`` is the only place in farebox that turns an
exact amount into micro-units, and it rounds up so a charge is never
under-stated.
"""

from __future__ import annotations

from decimal import Decimal

MICRO = 1_000_000

_SYMBOLS = {"USD": "$", "INR": "₹", "EUR": "€", "GBP": "£", "JPY": "¥"}


def round_up_micro(amount: Decimal) -> int:
    """Ceil an exact amount in currency units (e.g. ``Decimal("0.2730816")``) to micro-units."""
    if isinstance(amount, bool) or not isinstance(amount, (Decimal, int)):
        raise TypeError(f"money must be Decimal or int, never {type(amount).__name__}: {amount!r}")
    if isinstance(amount, Decimal) and not amount.is_finite():
        raise ValueError(f"cannot round a non-finite amount: {amount}")
    numerator, denominator = amount.as_integer_ratio()  # exact, whatever the amount's digits
    return -(-numerator * MICRO // denominator)


def to_decimal(micro: int) -> Decimal:
    """Micro-units back to an exact Decimal in currency units (273082 -> 0.273082)."""
    _check_micro(micro)
    return Decimal(f"{micro}E-6")  # exact: coefficient ``micro``, exponent -6


def format_money(micro: int, currency: str) -> str:
    """A human string with all six decimals, exact: (273082, "INR") -> "₹0.273082"."""
    _check_micro(micro)
    sign = "-" if micro < 0 else ""
    units, frac = divmod(abs(micro), MICRO)
    symbol = _SYMBOLS.get(currency)
    prefix = symbol if symbol is not None else f"{currency} "
    return f"{sign}{prefix}{units}.{frac:06d}"


def _check_micro(micro: int) -> None:
    if isinstance(micro, bool) or not isinstance(micro, int):
        raise TypeError(f"micro-units must be an int, got {type(micro).__name__}: {micro!r}")
