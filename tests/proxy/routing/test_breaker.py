"""Circuit breaker: opens on the error share, half-opens after the cooldown, closes on probes, backs off."""

from __future__ import annotations

from proxy.routing.breaker import CLOSED, HALF_OPEN, OPEN, Breaker
from proxy.snapshot import BreakerPolicy

POLICY = BreakerPolicy(error_pct=20, min_requests=50, window_s=30, cooldown_s=5, max_cooldown_s=20, probes=1,
                       close_after=2)


def fill(b: Breaker, now: float, ok: int, failed: int) -> list:
    changes = [b.record(now, True) for _ in range(ok)]
    return changes + [b.record(now, False) for _ in range(failed)]


def test_stays_closed_below_min_requests_even_if_all_fail() -> None:
    b = Breaker(POLICY)
    fill(b, 0.0, 0, 49)
    assert b.state == CLOSED and b.available(0.0)


def test_opens_above_error_share_over_min_requests() -> None:
    b = Breaker(POLICY)
    assert OPEN not in fill(b, 0.0, 40, 10)  # exactly 20%: not above
    assert b.record(0.5, False) == OPEN  # 11 / 51
    assert not b.available(1.0) and not b.acquire(1.0)


def test_old_outcomes_leave_the_window() -> None:
    b = Breaker(POLICY)
    fill(b, 0.0, 0, 30)
    fill(b, 31.0, 40, 0)  # the failures are 31 s old
    assert b.record(31.0, False) is None and b.state == CLOSED


def test_half_open_lets_one_probe_and_closes_after_successes() -> None:
    b = Breaker(POLICY)
    fill(b, 0.0, 0, 50)
    assert b.state == OPEN and not b.available(4.9)
    assert b.available(5.0)
    assert b.acquire(5.0) and b.state == HALF_OPEN
    assert not b.acquire(5.0)  # one probe at a time
    assert b.record(5.1, True) is None
    assert b.acquire(5.2)
    assert b.record(5.3, True) == CLOSED
    assert b.totals(5.3) == (0, 0)


def test_failed_probe_reopens_with_a_growing_cooldown_up_to_the_cap() -> None:
    b = Breaker(POLICY)
    fill(b, 0.0, 0, 50)
    now, cooldowns = 0.0, []
    for _ in range(4):
        now = b.open_until
        assert b.acquire(now)
        assert b.record(now, False) == OPEN
        cooldowns.append(b.cooldown_s)
    assert cooldowns == [10, 20, 20, 20]


def test_release_frees_the_probe_without_an_outcome() -> None:
    b = Breaker(POLICY)
    fill(b, 0.0, 0, 50)
    assert b.acquire(5.0)
    b.release()
    assert b.acquire(5.0) and b.state == HALF_OPEN
