"""A fleet paid by the GPU-hour: each hour's flat cost split over the attempts it served by their tokens (largest
remainder, to the micro-unit), idle hours reported as idle, in showback by any dimension."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from ledger.usage import TokenUsage
from pricing.book import FxTable, Price, PriceBook, PriceVersion
from reconcile.fleet import fleet_hours, month_window
from reconcile.showback import Fleets, showback
from reconcile.warehouse import Warehouse
from tests.reconcile.warehouse_fixtures import _admit, _attempt, _settle, write_archive

IST_10 = datetime(2026, 12, 1, 4, 30, tzinfo=timezone.utc)  # 10:00 in Kolkata, 1 December
FX = FxTable({("USD", "INR", "2026-12"): Decimal("88")})
FLEET = Price(input=Decimal(0), output=Decimal(0), currency="USD", gpu_hour=Decimal("1.10"), gpus=2)
BOOK = PriceBook.of([PriceVersion(1, IST_10, {"d-fleet": FLEET, "d-oai": Price(input=Decimal(1), output=Decimal(2))})])
HOUR_MICRO = 193_600_000  # 2 GPUs x 1.10 USD x 88 INR, in micro-units


def _served(rid: str, team: str, at: datetime, tokens: int, dep: str = "d-fleet") -> list:
    usage = TokenUsage(input=tokens)
    scopes = [f"key:{team}-k", f"team:{team}", "bu:retail"]
    return [_admit(rid, at, 1_000, team=team), _attempt(rid, at, 1, dep, True, usage, 0, team=team),
            _settle(rid, at + timedelta(seconds=5), 1_000, 0, dep, 1, usage, scopes)]


@pytest.fixture
def warehouse(tmp_path: Path):  # type: ignore[no-untyped-def]
    events = [*_served("a1", "payments", IST_10 + timedelta(minutes=5), 1_000),
              *_served("b1", "search", IST_10 + timedelta(minutes=6), 2_000),
              *_served("a2", "payments", IST_10 + timedelta(minutes=7), 1),
              # 11:00-12:00 idle; at 12:10 a request elsewhere: the archive has reached the hour from 12:00
              *_served("o1", "search", IST_10 + timedelta(hours=2, minutes=10), 50, dep="d-oai")]
    with Warehouse(write_archive(tmp_path / "archive", events)) as wh:
        yield wh


def test_each_hour_is_priced_once_from_the_version_in_force() -> None:
    start, end = month_window("2026-12", "Asia/Kolkata", IST_10 + timedelta(hours=2, minutes=10))
    assert start == IST_10 - timedelta(hours=10) and end == IST_10 + timedelta(hours=3)
    hours = fleet_hours(BOOK, FX, "INR", start, end)
    assert [h.start for h in hours] == [IST_10, IST_10 + timedelta(hours=1), IST_10 + timedelta(hours=2)]
    assert {(h.deployment, h.cost_micro, h.gpus) for h in hours} == {("d-fleet", HOUR_MICRO, 2)}
    closed = month_window("2026-11", "Asia/Kolkata", IST_10)  # a closed month: whole
    assert closed == (datetime(2026, 10, 31, 18, 30, tzinfo=timezone.utc), IST_10 - timedelta(hours=10))


def test_the_hours_cost_is_split_by_tokens_to_the_micro_unit(warehouse: Warehouse) -> None:
    fleets = Fleets(BOOK, FX, "INR")
    rows = showback(warehouse, "2026-12", ["team"], {}, fleets).dicts()
    by_team = {r["team"]: r for r in rows if r["requests"]}
    # 193,600,000 over 1,000 + 2,000 + 1 tokens: floors 64,511,829 / 129,023,658 / 64,511 with remainders
    # 1,171 / 2,342 / 2,489 (of 3,001): the 2 micro-units left go to a2, then b1
    assert by_team["payments"]["fleet_micro"] == 64_511_829 + 64_512
    assert by_team["search"]["fleet_micro"] == 129_023_659
    (idle,) = [r for r in rows if not r["requests"]]
    assert idle["idle_hours"] == 2 and idle["fleet_micro"] == 2 * HOUR_MICRO and idle["team"] is None
    assert sum(r["fleet_micro"] for r in rows) == 3 * HOUR_MICRO  # every priced hour, once
    assert by_team["payments"]["spend_micro"] == 0  # the gateway charged the token prices (0): budgets never see it


def test_by_deployment_and_without_fleet_prices(warehouse: Warehouse) -> None:
    rows = showback(warehouse, "2026-12", ["deployment"], {}, Fleets(BOOK, FX, "INR")).dicts()
    fleet = {r["deployment"]: r["fleet_micro"] for r in rows if r["requests"]}
    assert fleet == {"d-fleet": HOUR_MICRO, "d-oai": 0}
    (idle,) = [r for r in rows if not r["requests"]]
    assert idle["deployment"] == "d-fleet" and idle["fleet_micro"] == 2 * HOUR_MICRO
    plain = showback(warehouse, "2026-12", ["deployment"], {}).dicts()
    assert {r["fleet_micro"] for r in plain} == {0} and "idle_hours" not in plain[0]

