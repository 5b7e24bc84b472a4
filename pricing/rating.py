"""Rating: token usage x price -> integer micro-units of the budget currency.

All arithmetic is exact Decimal (an inexact step raises instead of rounding
silently); ``round_up_micro`` rounds once, at the very end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from decimal import Context, Decimal, Inexact, InvalidOperation, localcontext

from ledger.usage import TOKEN_TYPES, TokenUsage
from pricing.book import Price
from pricing.money import round_up_micro

_PER = Decimal(1_000_000)
_INPUT_TYPES = ("input", "cached_input", "cache_write", "cache_write_1h")
_OUTPUT_TYPES = ("output", "reasoning")
# Wide enough for any realistic tokens x price x fx; Inexact traps prove we never round early.
_EXACT = Context(prec=80, traps=[Inexact, InvalidOperation])


def exact_cost(usage: TokenUsage, price: Price, fx: Decimal) -> Decimal:
    """The unrounded cost in budget-currency units: sum of tokens x price per 1M x fx. The one-hour cache writes
    (``usage.cache_write_1h``, part of ``cache_write``) are priced at ``cache_write_1h``, the rest of the writes at
    ``cache_write``."""
    _check_fx(fx)
    with localcontext(_EXACT):
        total = sum(
            (Decimal(getattr(usage, kind)) * price.per_million(kind) for kind in TOKEN_TYPES),
            Decimal(0),
        )
        if usage.cache_write_1h:
            total += Decimal(usage.cache_write_1h) * (price.per_million("cache_write_1h")
                                                      - price.per_million("cache_write"))
        return total * fx / _PER


def rate(usage: TokenUsage, price: Price, fx: Decimal) -> int:
    """Cost of ``usage`` at ``price`` converted by ``fx``, in micro-units, rounded up once."""
    return round_up_micro(exact_cost(usage, price, fx))


def worst_case(
    input_tokens: int,
    output_tokens: int,
    prices: Iterable[Price],
    fx_for: Callable[[Price], Decimal],
) -> int:
    """The hold for a request not yet routed: input x highest input price + output cap x highest output price.

    "Highest" is taken over every candidate and every input-side type (input,
    cached, cache write) or output-side type (output, reasoning), after FX, so
    the hold covers whichever deployment and token mix the request ends up with.
    """
    return worst_case_at(input_tokens, output_tokens, top_rates(prices, fx_for))


def top_rates(prices: Iterable[Price], fx_for: Callable[[Price], Decimal]) -> tuple[Decimal, Decimal]:
    """``worst_case``'s highest input-side and output-side prices per million tokens over ``prices``, after FX:
    one request's holds at several output caps (admission's worst case and learned hold) share them."""
    candidates = list(prices)
    if not candidates:
        raise ValueError("worst_case needs at least one candidate price")
    with localcontext(_EXACT):
        converted = [(price, fx_for(price)) for price in candidates]
        for _, fx in converted:
            _check_fx(fx)
        top_in = max(p.per_million(k) * fx for p, fx in converted for k in _INPUT_TYPES)
        top_out = max(p.per_million(k) * fx for p, fx in converted for k in _OUTPUT_TYPES)
    return top_in, top_out


def worst_case_at(input_tokens: int, output_tokens: int, rates: tuple[Decimal, Decimal]) -> int:
    """``worst_case`` from ``top_rates``' prices."""
    top_in, top_out = rates
    with localcontext(_EXACT):
        total = (Decimal(input_tokens) * top_in + Decimal(output_tokens) * top_out) / _PER
    return round_up_micro(total)


def _check_fx(fx: Decimal) -> None:
    if not isinstance(fx, Decimal) or not fx.is_finite() or fx <= 0:
        raise ValueError(f"fx must be a positive finite Decimal, got {fx!r}")
