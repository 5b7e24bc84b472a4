"""Shared breakers, the pure part: what a pod tells, how another pod applies it, no echoes."""

from __future__ import annotations

from proxy.routing import shared_breakers
from proxy.routing.breaker import CLOSED, HALF_OPEN, OPEN, Breaker
from proxy.routing.shared_breakers import Notice
from proxy.snapshot import BreakerPolicy

POLICY = BreakerPolicy(error_pct=20, min_requests=10, window_s=30, cooldown_s=5, max_cooldown_s=20, probes=1,
                       close_after=2)
# pod A's clocks and pod B's: the same wall clock, unrelated monotonic clocks
WALL = 1_700_000_000.0
A_LOCAL, B_LOCAL = 100.0, 9_000.0


def open_locally(b: Breaker, now: float) -> None:
    for _ in range(10):
        b.record(now, False)
    assert b.state == OPEN


def test_an_open_is_told_once_and_applied_on_the_other_clock() -> None:
    a, told = {"dep": Breaker(POLICY)}, {}
    assert shared_breakers.outgoing(a, told, "pod-a", WALL, A_LOCAL) == []  # closed from the start: nothing
    open_locally(a["dep"], A_LOCAL)
    [notice] = shared_breakers.outgoing(a, told, "pod-a", WALL, A_LOCAL)
    assert (notice.state, notice.until - notice.at, notice.cooldown_s) == (OPEN, 5.0, 5.0)
    assert shared_breakers.outgoing(a, told, "pod-a", WALL + 1, A_LOCAL + 1) == []  # told already

    wire = shared_breakers.decode(notice.encode())
    assert wire == notice
    b = Breaker(POLICY)
    assert shared_breakers.apply(b, wire, "pod-b", WALL + 0.5, B_LOCAL)  # heard half a second later
    assert b.state == OPEN and b.open_until == B_LOCAL + 4.5 and not b.available(B_LOCAL + 4.4)
    assert b.available(B_LOCAL + 4.5)
    # applied, not B's own transition: B never tells it back
    assert shared_breakers.outgoing({"dep": b}, {}, "pod-b", WALL + 0.6, B_LOCAL + 0.1) == []


def test_own_notices_expired_opens_and_garbage_are_ignored() -> None:
    b = Breaker(POLICY)
    own = Notice("dep", OPEN, "pod-b", WALL, WALL + 5, 5)
    assert not shared_breakers.apply(b, own, "pod-b", WALL, B_LOCAL)
    past = Notice("dep", OPEN, "pod-a", WALL - 10, WALL - 5, 5)
    assert not shared_breakers.apply(b, past, "pod-b", WALL, B_LOCAL) and b.state == CLOSED
    assert shared_breakers.decode(b"not json") is None
    assert shared_breakers.decode(b'{"deployment": "dep", "state": "half_open", "pod": "x", "at": 1}') is None


def test_a_longer_open_extends_and_a_shorter_one_does_not() -> None:
    b = Breaker(POLICY)
    shared_breakers.apply(b, Notice("dep", OPEN, "pod-a", WALL, WALL + 10, 10), "pod-b", WALL, B_LOCAL)
    assert not shared_breakers.apply(b, Notice("dep", OPEN, "pod-c", WALL, WALL + 5, 5), "pod-b", WALL, B_LOCAL)
    assert b.open_until == B_LOCAL + 10
    assert shared_breakers.apply(b, Notice("dep", OPEN, "pod-c", WALL, WALL + 20, 20), "pod-b", WALL, B_LOCAL)
    assert b.open_until == B_LOCAL + 20 and b.cooldown_s == 20


def test_a_close_after_the_open_closes_and_an_older_close_does_not() -> None:
    b = Breaker(POLICY)
    open_locally(b, B_LOCAL)  # opened at B_LOCAL (= WALL on pod B's wall clock)
    stale = Notice("dep", CLOSED, "pod-a", WALL - 1)
    assert not shared_breakers.apply(b, stale, "pod-b", WALL, B_LOCAL) and b.state == OPEN
    fresh = Notice("dep", CLOSED, "pod-a", WALL + 6)
    assert shared_breakers.apply(b, fresh, "pod-b", WALL + 6.1, B_LOCAL + 6.1)
    assert b.state == CLOSED and b.available(B_LOCAL + 6.2) and b.totals(B_LOCAL + 6.2) == (0, 0)


def test_a_half_open_pod_closes_on_another_pods_close_and_its_probe_result_is_counted_normally() -> None:
    b = Breaker(POLICY)
    open_locally(b, B_LOCAL)
    assert b.acquire(B_LOCAL + 5) and b.state == HALF_OPEN
    assert shared_breakers.apply(b, Notice("dep", CLOSED, "pod-a", WALL + 5.5), "pod-b", WALL + 5.6, B_LOCAL + 5.6)
    assert b.record(B_LOCAL + 5.7, True) is None and b.state == CLOSED


def test_probe_closes_and_reopens_are_told() -> None:
    a, told = {"dep": Breaker(POLICY)}, {}
    b = a["dep"]
    open_locally(b, A_LOCAL)
    shared_breakers.outgoing(a, told, "pod-a", WALL, A_LOCAL)
    assert b.acquire(A_LOCAL + 5)
    assert b.record(A_LOCAL + 5.1, False) == OPEN  # the probe failed: open again, cooldown doubled
    [reopen] = shared_breakers.outgoing(a, told, "pod-a", WALL + 5.1, A_LOCAL + 5.1)
    assert (reopen.state, reopen.cooldown_s) == (OPEN, 10.0)
    for t in (15.1, 15.2):
        assert b.acquire(A_LOCAL + t)
        b.record(A_LOCAL + t, True)
    [close] = shared_breakers.outgoing(a, told, "pod-a", WALL + 15.2, A_LOCAL + 15.2)
    assert close.state == CLOSED and close.at == WALL + 15.2
    assert shared_breakers.describe(reopen) == {"deployment": "dep", "state": OPEN, "pod": "pod-a", "for_s": 10.0}


def test_with_a_probe_grace_the_opener_probes_for_the_fleet() -> None:
    """Pod B holds a remote open 2 s longer than pod A: A goes half-open first and probes. Its close reaches B
    before B's cooldown ends (B sends no probe); a failed probe's new open extends B's."""
    a, b = Breaker(POLICY), Breaker(POLICY)
    open_locally(a, A_LOCAL)  # 5 s cooldown
    [opened] = shared_breakers.outgoing({"dep": a}, {}, "pod-a", WALL, A_LOCAL)
    assert shared_breakers.apply(b, opened, "pod-b", WALL, B_LOCAL, probe_grace_s=2.0)
    assert b.open_until == B_LOCAL + 7.0
    assert a.acquire(A_LOCAL + 5.0) and a.state == HALF_OPEN  # A's probe goes out
    assert not b.available(B_LOCAL + 5.5) and not b.acquire(B_LOCAL + 5.5)  # B waits for it
    assert a.record(A_LOCAL + 5.5, False) is not None and a.state == OPEN  # the probe failed: A opens again
    [again] = shared_breakers.outgoing({"dep": a}, {"dep": 1}, "pod-a", WALL + 5.5, A_LOCAL + 5.5)
    assert shared_breakers.apply(b, again, "pod-b", WALL + 5.5, B_LOCAL + 5.5, probe_grace_s=2.0)
    assert b.open_until == B_LOCAL + 5.5 + (again.until - again.at) + 2.0 and b.state == OPEN
    closed = Notice("dep", CLOSED, "pod-a", WALL + 11.0)  # A's next probe succeeded
    assert shared_breakers.apply(b, closed, "pod-b", WALL + 11.1, B_LOCAL + 11.1, probe_grace_s=2.0)
    assert b.state == CLOSED and b.available(B_LOCAL + 11.2)
