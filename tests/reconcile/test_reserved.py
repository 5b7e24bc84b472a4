"""Provisioned capacity in showback: every reserved hour charged flat to the owning team once (a monthly price
spread over the month's hours exactly), used and unused hours counted, the tokens served at their own price."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from ledger.usage import TokenUsage
from pricing.book import FxTable, Price, PriceBook, PriceVersion
from reconcile.fleet import month_window
from reconcile.reserved import hour_micro, reserved_hours
from reconcile.showback import Fleets, showback
from reconcile.warehouse import Warehouse
from tests.reconcile.warehouse_fixtures import _admit, _attempt, _settle, write_archive

IST_10 = datetime(2026, 12, 1, 4, 30, tzinfo=timezone.utc)  # 10:00 in Kolkata, 1 December
FX = FxTable({("USD", "INR", "2026-12"): Decimal("88"), ("USD", "INR", "2026-11"): Decimal("88")})
RESERVED = Price(input=Decimal(0), output=Decimal(0), reserved_hour=Decimal("2.50"), reserved_team="search")
FROM_4 = datetime(2026, 12, 1, 4, tzinfo=timezone.utc)  # reserved hours are UTC hours
BOOK = PriceBook.of([PriceVersion(1, FROM_4, {"d-ptu": RESERVED, "d-oai": Price(input=Decimal(1), output=Decimal(2))})])
HOUR_MICRO = 220_000_000  # 2.50 USD x 88 INR


def _served(rid: str, team: str, at: datetime, tokens: int, dep: str = "d-ptu") -> list:
    usage = TokenUsage(input=tokens)
    scopes = [f"key:{team}-k", f"team:{team}", "bu:retail"]
    return [_admit(rid, at, 1_000, team=team), _attempt(rid, at, 1, dep, True, usage, 0, team=team),
            _settle(rid, at + timedelta(seconds=5), 1_000, 0, dep, 1, usage, scopes)]


@pytest.fixture
def warehouse(tmp_path: Path):  # type: ignore[no-untyped-def]
    events = [*_served("s1", "search", IST_10 + timedelta(minutes=5), 1_000),
              *_served("s2", "search", IST_10 + timedelta(minutes=6), 2_000),
              # 11:00-12:00 unused; at 12:10 a request elsewhere: the archive has reached the hour from 12:00
              *_served("o1", "payments", IST_10 + timedelta(hours=2, minutes=10), 50, dep="d-oai")]
    with Warehouse(write_archive(tmp_path / "archive", events)) as wh:
        yield wh


def test_a_monthly_price_is_spread_over_the_months_hours_exactly() -> None:
    price = Price(input=Decimal(0), output=Decimal(0), reserved_month=Decimal("1000.000001"), reserved_team="t")
    for month, hours in ((datetime(2026, 2, 1, tzinfo=timezone.utc), 672), (datetime(2026, 12, 1, tzinfo=timezone.utc), 744)):
        costs = [hour_micro(price, month + timedelta(hours=h)) for h in range(hours)]
        assert sum(costs) == 1_000_000_001 and max(costs) - min(costs) <= 1
    book = PriceBook.of([PriceVersion(1, datetime(2026, 1, 1, tzinfo=timezone.utc), {"d": price})])
    start, end = month_window("2026-12", "Asia/Kolkata", None)  # a zone a half hour off UTC
    hours = reserved_hours(book, FxTable({}), "USD", start, end)
    assert hours[0].start == datetime(2026, 11, 30, 19, tzinfo=timezone.utc)  # the first UTC hour starting in it
    assert len(hours) == 744  # 18:30 UTC to 18:30 UTC a month later: 744 hours start in it


def test_the_reservation_is_the_owners_flat_charge_used_or_not(warehouse: Warehouse) -> None:
    rows = showback(warehouse, "2026-12", ["team"], {}, Fleets(BOOK, FX, "INR")).dicts()
    (flat,) = [r for r in rows if r["reserved_hours"]]
    assert flat["team"] == "search" and flat["requests"] == 0
    # the UTC hours from 04:00 (in force) to 07:00 (the last to start before the archive's IST hour ends, 07:30)
    assert flat["reserved_hours"] == 4 and flat["reserved_micro"] == 4 * HOUR_MICRO
    assert flat["used_hours"] == 1 and flat["utilisation_pct"] == "25.0"
    served = {r["team"]: r for r in rows if r["requests"]}
    assert served["search"]["spend_micro"] == 0 and served["search"]["reserved_micro"] == 0  # tokens at 0
    assert sum(r["reserved_micro"] for r in rows) == 4 * HOUR_MICRO  # once
    by_dep = showback(warehouse, "2026-12", ["deployment"], {}, Fleets(BOOK, FX, "INR")).dicts()
    assert [(r["deployment"], r["reserved_micro"]) for r in by_dep if r["reserved_hours"]] == [("d-ptu", 4 * HOUR_MICRO)]
    plain = showback(warehouse, "2026-12", ["team"], {}).dicts()
    assert "reserved_micro" not in plain[0]


def test_a_reservation_needs_its_team_and_one_price() -> None:
    with pytest.raises(ValueError, match="reserved_team go together"):
        Price(input=Decimal(0), output=Decimal(0), reserved_hour=Decimal(1))
    with pytest.raises(ValueError, match="not both"):
        Price(input=Decimal(0), output=Decimal(0), reserved_hour=Decimal(1), reserved_month=Decimal(1),
              reserved_team="t")
    with pytest.raises(ValueError, match="GPU-hour or reserved"):
        Price(input=Decimal(0), output=Decimal(0), gpu_hour=Decimal(1), gpus=1, reserved_hour=Decimal(1),
              reserved_team="t")
    with pytest.raises(TypeError):
        Price(input=Decimal(0), output=Decimal(0), reserved_hour=1.5, reserved_team="t")  # type: ignore[arg-type]
