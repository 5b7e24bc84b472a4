"""Price versions 3 and 4 over the FOCUS test archive's book, and a price spec for ``farebox prices add``."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from decimal import Decimal

from pricing.book import Price, PriceVersion
from tests.reconcile.focus_archive import BOOK, V2

TYPO = "sim-openai-mumbai"
V3 = PriceVersion(3, datetime(2026, 12, 4, tzinfo=timezone.utc), {
    **V2.prices, "oai-mumbai": Price(input=Decimal("0.10"), cached_input=Decimal("0.05"), output=Decimal("0.40"))})
V4 = PriceVersion(4, datetime(2026, 12, 5, tzinfo=timezone.utc), {
    **V3.prices, "oai-mumbai": Price(input=Decimal("0.12"), cached_input=Decimal("0.06"), output=Decimal("0.48"))})
BOOK4 = BOOK.add(V3).add(V4)


def price_spec(prices, output_factor: int, deployment: str = TYPO) -> str:  # noqa: ANN001
    """Every deployment's price as ``farebox prices add --spec`` takes it, ``deployment``'s output x factor."""
    table = {}
    for dep, p in prices.items():
        row = {"currency": p.currency, "input": str(p.input),
               "output": str(p.output * (output_factor if dep == deployment else 1))}
        for name in ("cached_input", "cache_write", "reasoning"):
            if getattr(p, name) is not None:
                row[name] = str(getattr(p, name))
        table[dep] = row
    return json.dumps(table)
