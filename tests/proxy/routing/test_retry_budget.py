"""Retry budget: retries <= pct of requests (+ a floor) over a sliding window."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from proxy.routing.retry_budget import RetryBudget


def test_floor_lets_a_quiet_alias_fail_over() -> None:
    b = RetryBudget(pct=10, minimum=3, window_s=10)
    b.request(0.0)
    assert [b.try_spend(0.0) for _ in range(4)] == [True, True, True, False]


def test_ten_percent_of_requests() -> None:
    b = RetryBudget(pct=10, minimum=0, window_s=10)
    for _ in range(100):
        b.request(1.0)
    spent = sum(b.try_spend(1.0) for _ in range(50))
    assert spent == 10


def test_window_slides() -> None:
    b = RetryBudget(pct=10, minimum=0, window_s=10)
    for _ in range(100):
        b.request(0.0)
    assert sum(b.try_spend(0.0) for _ in range(20)) == 10
    assert not b.try_spend(5.0)
    for _ in range(100):
        b.request(11.0)  # the first 100 requests and their retries have left the window
    assert sum(b.try_spend(11.0) for _ in range(20)) == 10


@given(st.lists(st.tuples(st.floats(0, 0.99), st.booleans()), max_size=300), st.integers(0, 20), st.integers(0, 5))
def test_never_more_than_the_budget(ops: list, pct: int, minimum: int) -> None:
    """Whenever a retry is granted, the window's retries (it included) are within the budget. (Later, the
    requests that paid for it may leave the window before it does: the budget bounds what it grants, not what a
    sliding window holds afterwards.)"""
    b = RetryBudget(pct=pct, minimum=minimum, window_s=10)
    t = 0.0
    for dt, is_request in ops:
        t += dt
        if is_request:
            b.request(t)
        elif b.try_spend(t):
            requests, retries = b.totals(t)
            assert retries * 100 <= pct * requests + minimum * 100
