"""Showback and usage over the warehouse, and their bad input."""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import pytest

from ledger.codec import encode
from ledger.usage import TokenUsage
from reconcile.render import render
from reconcile.showback import parse_dimensions, showback, usage
from reconcile.warehouse import Warehouse, WarehouseError
from streams.archive.write import ArchiveWriter, Record
from tests.reconcile.warehouse_fixtures import MIDNIGHT_IST, _settle, write_archive

BUDGETS = {"team:payments": {"limit_micro": 40_000, "soft_pct": 80}, "team:search": {"limit_micro": None}}


@pytest.fixture
def warehouse(tmp_path: Path):  # type: ignore[no-untyped-def]
    with Warehouse(write_archive(tmp_path / "archive")) as wh:
        yield wh


def test_showback_by_team_is_spend_tokens_fallbacks_and_budget(warehouse: Warehouse) -> None:
    rows = {r["team"]: r for r in showback(warehouse, "2026-12", ["team"], BUDGETS).dicts()}
    pay = rows["payments"]
    assert (pay["requests"], pay["closed"], pay["served"]) == (4, 3, 2)
    assert pay["spend_micro"] == 12_000 + 15_000 + 5_000
    assert pay["input_tokens"] == 2_000 and pay["cached_input_tokens"] == 400 and pay["reasoning_tokens"] == 100
    assert (pay["fallbacks"], pay["fallback_rate"]) == (1, 0.5)
    assert pay["hedge_micro"] == 0 and pay["cache_saved_micro"] == 0
    assert (pay["budget_scope"], pay["budget_settled_micro"], pay["budget_held_micro"]) == ("team:payments", 32_000, 3_000)
    assert (pay["budget_limit_micro"], pay["budget_remaining_micro"], pay["budget_state"]) == (40_000, 5_000, "soft")
    assert (rows["search"]["budget_state"], rows["search"]["budget_remaining_micro"]) == ("unlimited", None)
    assert list(rows) == ["payments", "search"]  # most spend first




def test_hedge_spend_is_the_cost_of_the_legs_that_lost(tmp_path: Path) -> None:
    """A hedged request: the first leg is cut when the second answers (hedge_lost, its estimated input metered),
    the second serves. Showback's hedge column is the lost leg's cost, part of the spend; the per-request table
    gives the same figure."""
    from dataclasses import replace

    from reconcile.request_table_write import write_request_table
    from tests.reconcile.warehouse_fixtures import _admit, _attempt

    at = MIDNIGHT_IST + timedelta(days=2)
    scopes = ["key:payments-k", "team:payments", "bu:retail"]
    lost = replace(_attempt("h1", at, 1, "d-oai", False, TokenUsage(), 0), outcome="client_closed", status=499,
                   usage=TokenUsage(input=100, source="estimated"), cost_micro=1_234, error_code="hedge_lost")
    won = _attempt("h1", at, 2, "d-anth", True, TokenUsage(input=100, output=50), 5_000)
    failed = _attempt("h2", at, 1, "d-oai", False, TokenUsage(), 0)  # an ordinary failure is no hedge spend
    events = [_admit("h1", at, 20_000), lost, won, _settle("h1", at + timedelta(seconds=5), 20_000, 6_234, "d-anth", 2,
                                                           TokenUsage(input=200, output=50), scopes),
              _admit("h2", at, 20_000), failed,
              _attempt("h2", at, 2, "d-anth", True, TokenUsage(input=10, output=5), 700),
              _settle("h2", at + timedelta(seconds=5), 20_000, 700, "d-anth", 2, TokenUsage(input=10, output=5), scopes)]
    root = write_archive(tmp_path / "archive", events)
    for build in (False, True):
        if build:
            assert write_request_table(root, "Asia/Kolkata") is not None
        with Warehouse(root) as wh:
            assert (wh.table is not None) == build
            [row] = showback(wh, "2026-12", ["team"]).dicts()
            assert (row["hedge_micro"], row["spend_micro"], row["fallbacks"]) == (1_234, 6_234 + 700, 2)


@pytest.mark.parametrize(("limit", "state"), [(100_000, "ok"), (35_000, "exhausted"), (35_001, "soft")])
def test_budget_state_against_the_limit(warehouse: Warehouse, limit: int, state: str) -> None:
    budgets = {"team:payments": {"limit_micro": limit, "soft_pct": 80}}
    [pay] = [r for r in showback(warehouse, "2026-12", ["team"], budgets).dicts() if r["team"] == "payments"]
    assert pay["budget_state"] == state


def test_a_settlement_is_shown_in_the_month_of_its_admission(warehouse: Warehouse) -> None:
    [nov] = showback(warehouse, "2026-11", ["team"], BUDGETS).dicts()
    assert (nov["team"], nov["requests"], nov["spend_micro"], nov["budget_settled_micro"]) == ("payments", 1, 7_000, 7_000)


def test_groups_split_a_team_without_losing_money(warehouse: Warehouse) -> None:
    rows = showback(warehouse, "2026-12", ["team", "app", "alias"], BUDGETS).dicts()
    pay = [r for r in rows if r["team"] == "payments"]
    assert sum(r["spend_micro"] for r in pay) == 32_000
    assert {(r["app"], r["alias"]) for r in pay} == {("bot", "chat-default"), ("web", "chat-default"), ("bot", "chat-fast")}
    assert all(r["budget_scope"] == "team:payments" for r in pay)
    by_model = showback(warehouse, "2026-12", ["model"], BUDGETS).dicts()
    assert all(r["budget_scope"] is None and r["budget_state"] is None for r in by_model)
    assert sum(r["spend_micro"] for r in by_model) == 32_000 + 2_500


def test_cost_centre_groups_even_while_events_do_not_carry_it(warehouse: Warehouse) -> None:
    [row] = showback(warehouse, "2026-12", ["cost_centre"], BUDGETS).dicts()
    assert row["cost_centre"] is None and row["requests"] == 5


def test_an_unknown_by_column_is_named(warehouse: Warehouse) -> None:
    with pytest.raises(WarehouseError, match="unknown group-by column 'colour'; choose from team, business_unit"):
        showback(warehouse, "2026-12", ["team", "colour"])
    with pytest.raises(WarehouseError, match="unknown group-by column"):
        parse_dimensions("team;drop table requests")


def test_a_month_without_data_lists_the_months_there_are(warehouse: Warehouse) -> None:
    with pytest.raises(WarehouseError, match="no requests admitted in 2026-10 .* it holds 2026-11, 2026-12"):
        showback(warehouse, "2026-10", ["team"])
    with pytest.raises(WarehouseError, match="month must look like YYYY-MM"):
        showback(warehouse, "2026-13", ["team"])


def test_render_keeps_money_exact(warehouse: Warehouse) -> None:
    result = showback(warehouse, "2026-12", ["team"], BUDGETS)
    assert '"spend_micro": 32000' in render(result, "json")
    assert render(result, "csv").splitlines()[0].startswith("team,requests,closed,served,spend_micro")
    table = render(result, "table")
    assert "0.032000" in table and "spend " in table.splitlines()[0] + " "


def test_usage_by_day_and_alias(tmp_path: Path) -> None:
    root = write_archive(tmp_path / "archive")
    rows = usage(root, date(2026, 12, 1), date(2026, 12, 31), ["day", "alias"])
    assert [(r["day"], r["alias"], r["requests"]) for r in rows] == [
        (date(2026, 12, 1), "chat-default", 4), (date(2026, 12, 1), "chat-fast", 1)]
    assert usage(root, date(2027, 1, 1), date(2027, 1, 31), ["team"]) == []
    with pytest.raises(WarehouseError, match="unknown group-by column 'weekday'"):
        usage(root, date(2026, 12, 1), date(2026, 12, 31), ["weekday"])
    with pytest.raises(WarehouseError, match="ends .* before it starts"):
        usage(root, date(2026, 12, 31), date(2026, 12, 1), ["team"])
    with pytest.raises(WarehouseError, match="is empty"):
        usage(tmp_path / "nothing", date(2026, 12, 1), date(2026, 12, 31), ["team"])


def test_the_snapshot_is_reused_until_the_archive_changes(tmp_path: Path) -> None:
    """Showback snapshots ``requests`` and ``scope_balances`` once per archive state: a second report with the same
    files reads the snapshot; a newly archived file (r5 settles) makes the next report read the archive again,
    and between reports the views read the archive, never the snapshot."""
    root = write_archive(tmp_path / "archive")
    with Warehouse(root) as wh:
        first = showback(wh, "2026-12", ["team"]).dicts()
        state = wh.archive_state()
        assert wh.query("SELECT count(*) FROM temp.requests_snapshot").rows == [(6,)]
        wh.query("INSERT INTO temp.requests_snapshot SELECT * FROM temp.requests_snapshot WHERE request_id = 'r2'")
        doubled = {r["team"]: r for r in showback(wh, "2026-12", ["team"]).dicts()}  # same files: the snapshot
        assert doubled["payments"]["spend_micro"] == first[0]["spend_micro"] + 12_000
        assert wh.query("SELECT count(*) FROM requests").rows == [(6,)]  # unpinned: the archive again
        u = TokenUsage(input=10, output=10)
        settle = _settle("r5", MIDNIGHT_IST + timedelta(hours=2), 3_000, 1_000, "d-oai", 1, u,
                         ["key:payments-k", "team:payments", "bu:retail"])
        ArchiveWriter(root, "log").write([Record(0, 100, encode(settle))])
        assert wh.archive_state() != state
        after = {r["team"]: r for r in showback(wh, "2026-12", ["team"]).dicts()}
        assert after["payments"]["spend_micro"] == first[0]["spend_micro"] + 1_000  # recomputed, r2 once
        assert after["payments"]["budget_settled_micro"] == first[0]["budget_settled_micro"] + 1_000
        assert after["payments"]["budget_held_micro"] == first[0]["budget_held_micro"] - 3_000
