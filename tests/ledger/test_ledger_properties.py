"""Ledger invariants under random interleavings (ARCHITECTURE.md, ledger/README.md).

A run is a random sequence of operations against one in-process ledger, the
way embedded mode uses it: admissions gated by ``decide_admit`` (and applied
at once), attempts, settlements (some costing more than their hold), clock
ticks across the end of a month in Kolkata, sweeps of expired holds, and
re-deliveries of any earlier event at any later point (so a duplicate admit
may arrive after its settlement). Every delivered event, duplicates included,
goes to ``log`` in delivery order.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta, timezone

from hypothesis import event as hypothesis_event
from hypothesis import given, settings
from hypothesis import strategies as st
from ledger_builders import IST, admit, attempt, correct, settle

from ledger.admission import ScopeLimit, decide_admit, decide_expiries, threshold_events
from ledger.balances import Ledger, ScopeBalance
from ledger.events import (
    Event,
    HoldExpired,
    RatingCorrected,
    RequestAdmitted,
    RequestSettled,
)
from ledger.periods import balance_period, period_of

START = datetime(2026, 11, 30, 18, 0, tzinfo=timezone.utc)  # 23:30 IST: December is 30 minutes away
LIMITS = {
    "key:a": ScopeLimit(5_000, soft_pct=50),
    "key:b": ScopeLimit(None),
    "key:c": ScopeLimit(3_000),
    "team:t": ScopeLimit(8_000),
    "team:u": ScopeLimit(6_000, soft_pct=90),
    "bu:b": ScopeLimit(12_000),
    "run:x": ScopeLimit(4_000, max_calls=4),
}
SCOPE_SETS = [
    ("key:a", "team:t", "bu:b"),
    ("key:b", "team:t", "bu:b"),
    ("key:c", "team:u", "bu:b", "run:x"),
    ("run:x", "team:u"),
]

admits = st.tuples(
    st.just("admit"),
    st.integers(0, len(SCOPE_SETS) - 1),
    st.sampled_from([500, 1_000, 2_000]) | st.integers(0, 2_500),  # round amounts hit limits exactly
    st.sampled_from([60, 900]),
)
ops = st.lists(
    st.one_of(
        admits,
        admits,
        st.tuples(st.just("attempt"), st.integers(0, 10**6)),
        st.tuples(st.just("settle"), st.integers(0, 10**6), st.sampled_from([100]) | st.integers(0, 200)),  # cost as % of the hold
        st.tuples(st.just("tick"), st.integers(1, 1_200)),
        st.tuples(st.just("correct"), st.integers(0, 10**6), st.integers(0, 300)),  # re-rate to % of the hold
        st.tuples(st.just("sweep")),
        st.tuples(st.just("dup"), st.integers(0, 10**6)),
    ),
    min_size=40,  # hypothesis aims at ~2x min_size: runs long enough to exhaust budgets
    max_size=200,
)


class Run:
    def __init__(self) -> None:
        self.ledger = Ledger(IST)
        self.log: list[Event] = []
        self.now = START
        self.admitted: dict[str, RequestAdmitted] = {}
        self.settled: dict[str, RequestSettled] = {}
        self.attempts: dict[str, int] = defaultdict(int)
        self.rated: dict[str, RatingCorrected] = {}  # each request's latest correction (a chain, relative)
        self.charged: list[str] = []  # requests whose settlement the ledger charged (not expired before it)
        self.raised: dict[tuple[str, str], int] = defaultdict(int)  # corrections upwards per balance

    def deliver(self, event: Event) -> bool:
        self.log.append(event)
        return self.ledger.apply(event)

    def step(self, op: tuple) -> None:
        kind = op[0]
        if kind == "admit":
            self.admit(SCOPE_SETS[op[1]], op[2], op[3])
        elif kind == "tick":
            self.now += timedelta(seconds=op[1])
        elif kind == "sweep":
            for expiry in decide_expiries(self.ledger, self.now):
                hypothesis_event("hold expired")
                assert self.deliver(expiry)
        elif kind == "dup" and self.log:
            event = self.log[op[1] % len(self.log)]
            before = self.ledger.to_bytes()
            assert not self.deliver(event)
            assert self.ledger.to_bytes() == before
        elif kind in ("attempt", "settle") and self.admitted:
            request_id = list(self.admitted)[op[1] % len(self.admitted)]
            if kind == "attempt":
                self.attempts[request_id] += 1
                self.deliver(attempt(request_id, 1, at=self.now, n=self.attempts[request_id]))
            else:
                self.settle(request_id, op[2])
        elif kind == "correct" and self.charged:  # re-rating corrects what a settlement charged
            self.correct(self.charged[op[1] % len(self.charged)], op[2])

    def correct(self, request_id: str, pct: int) -> None:
        """Re-rate a settled request: relative to the cost its latest correction left (or its settlement)."""
        last = self.rated.get(request_id)
        old = dict(last.cost_by_scope) if last else dict(self.settled[request_id].cost_by_scope)
        holds = self.admitted[request_id].holds
        new = {scope: hold * pct // 100 for scope, hold in holds.items()}
        event = correct(request_id, old, new, sequence=last.sequence + 1 if last else 1,
                        admitted_at=self.admitted[request_id].time, at=self.now)
        self.rated[request_id] = event
        hypothesis_event("corrected twice" if event.sequence > 1 else "corrected")
        assert self.deliver(event)
        period = period_of(event.admitted_at, IST)
        for scope, delta in event.deltas().items():
            self.raised[scope, balance_period(scope, period)] += max(delta, 0)

    def admit(self, scopes: tuple[str, ...], amount: int, ttl_s: int) -> None:
        period = period_of(self.now, IST)
        decision = decide_admit(self.ledger, scopes=scopes, amount_micro=amount, limits=LIMITS, period=period)
        hypothesis_event(f"admit {decision.reason or 'ok'}")
        if decision.soft_crossed:
            hypothesis_event("soft threshold crossed")
        if not decision.ok:
            scope, limit = decision.short_scope, LIMITS[decision.short_scope]
            balance = self.ledger.balance(scope, period)
            if decision.reason == "run_calls_exhausted":
                assert balance.requests >= limit.max_calls
            else:
                assert self.ledger.available(scope, period, limit.limit_micro) < amount
            return
        request_id = f"r{len(self.admitted)}"
        event = admit(request_id, {scope: amount for scope in scopes}, at=self.now, ttl_s=ttl_s)
        self.admitted[request_id] = event
        assert self.deliver(event)
        notices = threshold_events(
            decision, limits=LIMITS, period=period, request_id=request_id, currency="INR", now=self.now
        )
        for notice in notices:
            assert self.deliver(notice)

    def settle(self, request_id: str, cost_pct: int) -> None:
        event = self.settled.get(request_id)
        if event is None:  # the pod settles once; a second "settle" is a redelivery
            holds = self.admitted[request_id].holds
            costs = {scope: hold * cost_pct // 100 for scope, hold in holds.items()}
            event = self.settled[request_id] = settle(request_id, costs, holds, at=self.now)
        if self.deliver(event):
            self.charged.append(request_id)
            if event.overrun_micro:
                hypothesis_event("settled with overrun")

    def check_limits(self) -> None:
        for (scope, bp), balance in self.ledger.balances().items():
            limit = LIMITS[scope].limit_micro
            assert balance.held >= 0
            if limit is not None:
                # a correction upwards is applied whatever the limit (the money was spent) and recorded in
                # its event, never hidden, like an overrun
                slack = balance.overrun + self.raised[scope, bp]
                assert balance.settled + balance.held <= limit + slack, (scope, balance)
            if LIMITS[scope].max_calls is not None:
                assert balance.requests <= LIMITS[scope].max_calls


def fold(events: list[Event], ledger: Ledger | None = None) -> Ledger:
    ledger = ledger or Ledger(IST)
    for event in events:
        ledger.apply(event)
    return ledger


def reference_balances(log: list[Event]) -> dict[tuple[str, str], ScopeBalance]:
    """A deliberately naive re-statement of the fold, to check the real one against."""
    state: dict[str, tuple[str, dict[str, int]] | None] = {}  # open: (period, holds); closed: None
    totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    corrections: set[str] = set()
    for event in log:
        if isinstance(event, RatingCorrected) and event.id not in corrections:
            corrections.add(event.id)
            period = period_of(event.admitted_at, IST)
            for scope in event.cost_by_scope.keys() | event.old_cost_by_scope.keys():
                delta = event.cost_by_scope.get(scope, 0) - event.old_cost_by_scope.get(scope, 0)
                totals[scope, balance_period(scope, period)][0] += delta
                totals[scope, balance_period(scope, period)][4] += delta
        if isinstance(event, RequestAdmitted) and event.request_id not in state:
            period = period_of(event.time, IST)
            state[event.request_id] = (period, dict(event.holds))
            for scope, amount in event.holds.items():
                totals[scope, balance_period(scope, period)][1] += amount
                totals[scope, balance_period(scope, period)][3] += 1
        elif isinstance(event, (RequestSettled, HoldExpired)) and state.get(event.request_id):
            period, holds = state[event.request_id]  # type: ignore[misc]
            state[event.request_id] = None
            charges = event.cost_by_scope if isinstance(event, RequestSettled) else event.charged
            for scope in holds.keys() | charges.keys():
                t = totals[scope, balance_period(scope, period)]
                t[0] += charges.get(scope, 0)
                t[1] -= holds.get(scope, 0)
                t[2] += max(charges.get(scope, 0) - holds.get(scope, 0), 0)
    return {key: ScopeBalance(*t) for key, t in sorted(totals.items())}


@settings(max_examples=300, deadline=None)
@given(ops, st.integers(0, 10**6))
def test_ledger_invariants_under_random_interleavings(operations, cut):
    run = Run()
    for op in operations:
        run.step(op)
        run.check_limits()

    # a final sweep leaves no hold behind: every admitted request ends settled or expired
    run.now += timedelta(days=1)
    for expiry in decide_expiries(run.ledger, run.now):
        run.deliver(expiry)
    assert run.ledger.open_holds() == []
    for request_id, event in run.admitted.items():
        assert run.ledger.is_closed(request_id, period_of(event.time, IST))
    assert all(balance.held == 0 for balance in run.ledger.balances().values())
    run.check_limits()

    # balances are a projection of the log: re-folding, from scratch or from a checkpoint, is identical
    final = run.ledger.to_bytes()
    assert fold(run.log).to_bytes() == final
    k = cut % (len(run.log) + 1)
    from_checkpoint = Ledger.from_bytes(fold(run.log[:k]).to_bytes())
    assert fold(run.log[k:], from_checkpoint).to_bytes() == final
    assert run.ledger.balances() == reference_balances(run.log)

    # duplicates change nothing: the log without them folds to the same ledger
    seen: set[str] = set()
    unique = [e for e in run.log if not (e.id in seen or seen.add(e.id))]  # type: ignore[func-returns-value]
    assert fold(unique).to_bytes() == final


@settings(max_examples=100, deadline=None)
@given(ops)
def test_soft_threshold_notice_at_most_once_per_scope_and_period(operations):
    run = Run()
    for op in operations:
        run.step(op)
    ids_by_mark: dict[tuple[str, str], set[str]] = defaultdict(set)
    for e in run.log:
        if e.type == "budget.threshold_crossed":
            ids_by_mark[e.scope, balance_period(e.scope, e.period)].add(e.id)  # type: ignore[attr-defined]
    # repeats are re-deliveries of the same notice (the "dup" op), never a second decision
    assert all(len(ids) == 1 for ids in ids_by_mark.values())


@settings(max_examples=200, deadline=None)
@given(ops, st.randoms(use_true_random=False))
def test_corrections_fold_out_of_order_and_twice_to_the_same_bytes(operations, rnd):
    """Corrections commute: moved anywhere after their request's admission, and delivered again at random
    points, they fold to the same ledger as in log order (deltas add; each id counts once)."""
    run = Run()
    for op in operations:
        run.step(op)
    final = run.ledger.to_bytes()
    others = [e for e in run.log if not isinstance(e, RatingCorrected)]
    shuffled = list(others)
    for fix in [e for e in run.log if isinstance(e, RatingCorrected)]:
        admitted_at = next(i for i, e in enumerate(shuffled) if e.id == f"{fix.request_id}/admitted")
        shuffled.insert(rnd.randint(admitted_at + 1, len(shuffled)), fix)
        shuffled.insert(rnd.randint(admitted_at + 1, len(shuffled)), fix)  # and once more, later or earlier
    assert fold(shuffled).to_bytes() == final
    assert fold(shuffled + shuffled).to_bytes() == final
