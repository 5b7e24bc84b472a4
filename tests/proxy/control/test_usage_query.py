"""The usage API's query string, read without I/O: defaults, CSV negotiation, and a 400 naming each bad field."""

from __future__ import annotations

from datetime import date

import pytest

from proxy.control.admin.usage import to_csv
from proxy.control.usage_port import UsageTable, money_strings, parse_usage_query
from proxy.errors import InvalidRequest

DIMS = ("team", "app", "alias", "model", "day")
TODAY = date(2026, 12, 17)


def test_defaults_are_this_month_so_far_by_team_as_json() -> None:
    ask = parse_usage_query({}, None, TODAY, DIMS)
    assert (ask.start, ask.end, ask.by, ask.fmt) == (date(2026, 12, 1), TODAY, ("team",), "json")


def test_by_keeps_order_drops_repeats_and_group_by_is_an_alias() -> None:
    assert parse_usage_query({"by": "alias, team,alias"}, None, TODAY, DIMS).by == ("alias", "team")
    assert parse_usage_query({"group_by": "team,day"}, None, TODAY, DIMS).by == ("team", "day")


@pytest.mark.parametrize(("query", "accept", "fmt"), [
    ({}, "text/csv", "csv"), ({}, "application/json, text/plain", "json"), ({"format": "json"}, "text/csv", "json"),
    ({"format": "csv"}, None, "csv"),
])
def test_csv_by_accept_header_or_format(query: dict, accept: str | None, fmt: str) -> None:
    assert parse_usage_query(query, accept, TODAY, DIMS).fmt == fmt


@pytest.mark.parametrize(("query", "param"), [
    ({"by": "team,weekday"}, "by"), ({"by": " , "}, "by"), ({"group_by": "colour"}, "group_by"),
    ({"from": "2026-12-32"}, "from"), ({"to": "12/01/2026"}, "to"), ({"from": "2026-12-10", "to": "2026-12-09"}, "to"),
    ({"from": "2024-01-01"}, "from"), ({"format": "xlsx"}, "format"), ({"limit": "0"}, "limit"),
    ({"team": "platform"}, "team"),
])
def test_bad_input_names_the_field(query: dict, param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_usage_query(query, None, TODAY, DIMS)
    assert caught.value.param == param and caught.value.status == 400


def test_money_is_an_exact_string_and_csv_has_its_header_without_rows() -> None:
    assert money_strings({"spend_micro": 12_345_678_901_234_567, "requests": 3, "day": date(2026, 12, 1)}) == {
        "spend_micro": "12345678901234567", "requests": 3, "day": "2026-12-01"}
    assert to_csv(UsageTable(("team", "spend_micro"), [])) == "team,spend_micro\n"
    table = UsageTable(("team", "spend_micro", "ttft_p50_ms"), [{"team": "a,b", "spend_micro": 7, "ttft_p50_ms": None}])
    assert to_csv(table) == 'team,spend_micro,ttft_p50_ms\n"a,b",7,\n'
