"""reconcile/sql/our_usage.sql over a small archive in DuckDB, priced into OurUsage rows; figures by hand."""

from __future__ import annotations

from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path

import duckdb
import orjson
import pyarrow as pa
import pytest

from pricing.book import Price
from reconcile.drift import DriftInputError, compare_tokens
from reconcile.exports import parse_simulator_export
from reconcile.our_usage import our_usage_rows, unattributed_expired
from streams.archive.schema import SCHEMA, typed_row

SQL = Path(__file__).parents[3] / "reconcile" / "sql" / "our_usage.sql"
NOV30, DEC1 = date(2026, 11, 30), date(2026, 12, 1)
PRICES = {(2, "d1"): Price(input=Decimal("1.00"), output=Decimal("2.00"), cached_input=Decimal("0.50")),
          (3, "d2"): Price(input=Decimal("3"), output=Decimal("6"), cache_write=Decimal("3.75")),
          (2, "d1@flex"): Price(input=Decimal("0.50"), output=Decimal("1.00"))}


def price_of(version: int, deployment: str, currency: str, tier: str | None = None) -> tuple[Price, Decimal]:
    assert currency == "USD"
    served = f"{deployment}@{tier}" if tier and (version, f"{deployment}@{tier}") in PRICES else deployment
    return PRICES[(version, served)], Decimal(1)


def _event(kind: str, request_id: str, at: str, **fields: object) -> dict:
    wire = {"id": f"{request_id}/{kind}", "type": kind, "schema": 1, "time": at, "request_id": request_id,
            "team": "t1", **fields}
    return typed_row(wire, stored_at=datetime(2026, 12, 2, tzinfo=timezone.utc), partition=0, offset=0,
                     text=orjson.dumps(wire).decode())


def _attempt(request_id: str, at: str, deployment: str, version: int, source: str = "provider",
             tier: str | None = None, **usage: int) -> dict:
    tokens = {"input": 0, "cached_input": 0, "cache_write": 0, "output": 0, "reasoning": 0, **usage}
    return _event("request.attempted", request_id, at, attempt=1, deployment=deployment, provider="openai",
                  account="acme", model="gpt-sim", cost_micro=1, currency="USD", price_version=version,
                  usage={**tokens, "source": source, **({"service_tier": tier} if tier else {})})


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    rows = [
        _event("request.admitted", "r1", "2026-11-30T10:00:00.000000Z"),
        _attempt("r1", "2026-11-30T10:00:01.000000Z", "d1", 2, input=100, cached_input=50, output=200, reasoning=20),
        _attempt("r2", "2026-11-30T11:00:00.000000Z", "d1", 2, "estimated", input=40, output=10),
        _attempt("r3", "2026-11-30T12:00:00.000000Z", "d2", 3, cache_write=30, output=5),
        # an attempt just after midnight belongs to the next day
        _attempt("r4", "2026-12-01T00:00:01.000000Z", "d1", 2, input=7, output=3),
        # attempted, then the pod died: its expiry (next day) counts on the day it was admitted
        _event("request.admitted", "r5", "2026-11-30T23:00:00.000000Z"),
        _attempt("r5", "2026-11-30T23:00:01.000000Z", "d1", 2, input=10),
        _event("hold.expired", "r5", "2026-12-01T00:10:00.000000Z", charged={"team:t1": 5}, currency="USD"),
        # the pod died before any attempt was recorded
        _event("request.admitted", "r6", "2026-11-30T22:00:00.000000Z"),
        _event("hold.expired", "r6", "2026-12-01T00:05:00.000000Z", charged={"team:t1": 5}, currency="USD"),
    ]
    db = duckdb.connect()
    db.register("events", pa.Table.from_pylist(rows, schema=SCHEMA))
    db.execute(SQL.read_text())
    yield db
    db.close()


def _records(db: duckdb.DuckDBPyConnection, view: str) -> list[dict]:
    cur = db.execute(f"SELECT * FROM {view}")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def test_our_usage_priced_by_type_with_hand_checked_figures(con):
    rows = {(r.day, r.token_type): r for r in our_usage_rows(_records(con, "our_usage"), price_of)}
    nov = lambda t: rows[(NOV30, t)]  # noqa: E731
    # input: 100 + 40 + 10 at $1.00/1M = $0.000150
    assert (nov("input").tokens, nov("input").estimated_tokens, nov("input").cost_micro) == (150, 40, 150)
    assert nov("input").price_versions == {2} and nov("input").expired_requests == 1  # r5
    # cached input: 50 at $0.50/1M = $0.000025
    assert (nov("cached_input").tokens, nov("cached_input").cost_micro, nov("cached_input").priced) == (50, 25, True)
    # cache write: only d2 wrote (30 at $3.75/1M = $0.0001125, rounded up once); d1's zero says nothing
    cw = nov("cache_write")
    assert (cw.tokens, cw.cost_micro, cw.priced, cw.price_versions) == (30, 113, True, {3})
    # output: 210 at $2/1M + 5 at $6/1M = $0.00045; priced under two versions
    out = nov("output")
    assert (out.tokens, out.estimated_tokens, out.cost_micro, out.price_versions) == (215, 10, 450, {2, 3})
    # reasoning: d1 has no reasoning price of its own, so it was charged at output's: unpriced
    assert (nov("reasoning").tokens, nov("reasoning").cost_micro, nov("reasoning").priced) == (20, 40, False)
    assert (rows[(DEC1, "input")].tokens, rows[(DEC1, "input")].expired_requests) == (7, 0)
    assert unattributed_expired(_records(con, "our_expired_unattributed")) == {NOV30: 1}


def test_ours_against_a_provider_export_names_estimated_and_expired(con):
    ours = [r for r in our_usage_rows(_records(con, "our_usage"), price_of) if r.day == NOV30]
    export = {"object": "usage_export", "data": [{"account": "acme", "date": "2026-11-30", "model": "gpt-sim",
                                                  "requests": 5, "input": 150, "cached_input": 50,
                                                  "cache_write": 30, "output": 240, "reasoning": 20}]}
    rows = compare_tokens(parse_simulator_export(export), ours,
                          unattributed_expired=unattributed_expired(_records(con, "our_expired_unattributed")))
    assert [r.token_type for r in rows if r.flagged] == ["output"]
    out = next(r for r in rows if r.flagged)
    assert (out.provider_figure, out.ours, out.difference) == (240, 215, 25)
    assert [c.code for c in out.causes] == ["estimated_usage", "expired_holds", "expired_holds"]


def test_an_attempt_served_at_a_tier_is_priced_at_that_tiers_prices():
    """Ours is what the provider should bill: flex-served tokens at the flex price, the rest at the standard."""
    rows = [_attempt("f1", "2026-11-30T10:00:00.000000Z", "d1", 2, tier="flex", input=1_000_000, output=1_000_000),
            _attempt("s1", "2026-11-30T11:00:00.000000Z", "d1", 2, input=1_000_000)]
    db = duckdb.connect()
    db.register("events", pa.Table.from_pylist(rows, schema=SCHEMA))
    db.execute(SQL.read_text())
    ours = {(r.token_type, r.tier): r for r in our_usage_rows(_records(db, "our_usage"), price_of)}
    db.close()
    assert (ours[("input", "flex")].tokens, ours[("input", "flex")].cost_micro) == (1_000_000, 500_000)  # $0.50
    assert (ours[("input", None)].tokens, ours[("input", None)].cost_micro) == (1_000_000, 1_000_000)  # $1.00
    assert (ours[("output", "flex")].tokens, ours[("output", "flex")].cost_micro) == (1_000_000, 1_000_000)  # not $2


def test_rows_without_a_key_part_are_refused():
    bad = {"account": None, "day": NOV30, "model": "m", "token_type": "input", "price_version": 2,
           "deployment": "d1", "currency": "USD", "tokens": 1, "estimated_tokens": 0, "expired_requests": 0}
    with pytest.raises(DriftInputError, match="our_usage row 0: account, day, model and token_type must be set"):
        our_usage_rows([bad], price_of)
    assert our_usage_rows([], price_of) == []
