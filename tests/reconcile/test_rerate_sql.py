"""Re-rating in DuckDB equals ``pricing.rate`` to the micro-unit, and its report equals ``rerate``'s."""

from __future__ import annotations

from datetime import date, datetime, timezone
from decimal import Decimal

import duckdb
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.usage import TOKEN_TYPES, TokenUsage
from pricing.book import FxTable, Price, PriceVersion
from pricing.rating import rate
from reconcile.rerate.archive import plan_rerate
from reconcile.rerate.reprice import RerateError
from reconcile.rerate.sql import rate_attempts, rerate_lines
from reconcile.warehouse import Warehouse
from tests.reconcile.focus_archive import FX, month_events, write_archive
from tests.reconcile.rerate_fixtures import BOOK4

UTC = timezone.utc
NOW = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)

tokens = st.one_of(st.just(0), st.integers(0, 5_000), st.integers(0, 50_000_000))
usages = st.builds(TokenUsage, input=tokens, cached_input=tokens, cache_write=tokens, output=tokens, reasoning=tokens)
# some of the cache writes with a one-hour lifetime (priced on their own)
usages = st.tuples(usages, st.integers(0, 100)).map(
    lambda pair: TokenUsage(**{**{k: getattr(pair[0], k) for k in TOKEN_TYPES},
                              "cache_write_1h": pair[0].cache_write * pair[1] // 100}))


def _price(draw: st.DrawFn) -> Price:
    def one() -> Decimal:
        places = draw(st.integers(0, 9))
        return Decimal(draw(st.integers(0, 500 * 10**places))).scaleb(-places)

    optional = {k: (one() if draw(st.booleans()) else None)
                for k in ("cached_input", "cache_write", "reasoning", "cache_write_1h")}
    return Price(input=one(), output=one(), currency=draw(st.sampled_from(["USD", "EUR", "INR"])), **optional)


@st.composite
def books(draw: st.DrawFn) -> tuple[PriceVersion, FxTable, list[tuple[str, datetime, TokenUsage]]]:
    deployments = [f"d{i}" for i in range(draw(st.integers(1, 4)))]
    version = PriceVersion(1, datetime(2026, 1, 1, tzinfo=UTC), {d: _price(draw) for d in deployments})
    fx = {}
    for ccy in ("USD", "EUR"):
        for month in ("2026-10", "2026-11"):
            places = draw(st.integers(0, 8))
            fx[(ccy, "INR", month)] = Decimal(draw(st.integers(1, 200 * 10**places))).scaleb(-places)
    times = st.datetimes(datetime(2026, 10, 1), datetime(2026, 11, 30, 23, 59), timezones=st.just(UTC))
    attempts = draw(st.lists(st.tuples(st.sampled_from(deployments), times, usages), min_size=1, max_size=40))
    return version, FxTable(fx), attempts


@settings(max_examples=40, deadline=None)
@given(books())
def test_sql_rating_equals_pricing_rate_to_the_micro_unit(case):
    version, fx, attempts = case
    table = pa.table({
        "id": [f"a{n:03d}" for n in range(len(attempts))], "deployment": [d for d, _, _ in attempts],
        "event_time": pa.array([t for _, t, _ in attempts], pa.timestamp("us", tz="UTC")),
        **{f"{k}_tokens": [getattr(u, k) for _, _, u in attempts] for k in (*TOKEN_TYPES, "cache_write_1h")}})
    con = duckdb.connect()
    try:
        got = rate_attempts(con, table, version, fx, "INR")
    finally:
        con.close()
    want = []
    for deployment, at, usage in attempts:
        price = version.price(deployment)
        want.append(rate(usage, price, fx.rate(price.currency, "INR", at))
                    if usage.prompt_tokens or usage.completion_tokens else 0)
    assert got == want


def test_a_missing_fx_rate_or_price_fails_the_whole_query():
    version = PriceVersion(1, datetime(2026, 1, 1, tzinfo=UTC), {"d0": Price(input=Decimal("1"), output=Decimal("2"),
                                                                              currency="USD")})
    table = pa.table({"id": ["a1", "a2"], "deployment": ["d0", "nope"],
                      "event_time": pa.array([datetime(2026, 10, 2, tzinfo=UTC)] * 2, pa.timestamp("us", tz="UTC")),
                      **{f"{k}_tokens": [5, 5] for k in TOKEN_TYPES}})
    con = duckdb.connect()
    try:
        with pytest.raises(duckdb.Error, match="no FX rate USD->INR for 2026-10"):
            rate_attempts(con, table.slice(0, 1), version, FxTable({}), "INR")
        with pytest.raises(duckdb.Error, match="deployment nope has no price"):
            rate_attempts(con, table, version, FxTable({("USD", "INR", "2026-10"): Decimal("83.1")}), "INR")
    finally:
        con.close()


def test_the_sql_report_equals_the_exact_rerate(tmp_path):
    root = write_archive(tmp_path / "archive", month_events(count=80))
    start, end = date(2026, 11, 1), date(2026, 11, 30)
    with Warehouse(root) as wh:
        for version in (1, 3):
            exact = plan_rerate(root, start, end, BOOK4, FX, version, now=NOW)
            fast = rerate_lines(wh, start, end, BOOK4.get(version), FX)
            assert fast.lines == exact.lines, version
            assert fast.counts.get("correct", 0) == len(exact.corrections), version
            assert sum(n for k, n in fast.counts.items() if k not in ("ok", "correct")) == len(exact.skipped)
            assert sum(fast.counts.values()) == exact.requests


def test_a_window_without_requests_is_empty_and_a_reversed_one_refused(tmp_path):
    root = write_archive(tmp_path / "archive", month_events(count=20))
    with Warehouse(root) as wh:
        assert rerate_lines(wh, date(2026, 1, 1), date(2026, 1, 2), BOOK4.get(3), FX).lines == []
        with pytest.raises(RerateError, match="after"):
            rerate_lines(wh, date(2026, 11, 2), date(2026, 11, 1), BOOK4.get(3), FX)
