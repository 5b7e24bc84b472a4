from datetime import timedelta

import pytest
from ledger_builders import IST, T0, admit, settle

from ledger.admission import (
    AdmitDecision,
    ScopeLimit,
    decide_admit,
    decide_expiries,
    exceeds_cost_cap,
    threshold_events,
)
from ledger.balances import Ledger
from ledger.events import HoldExpired

TEAM, KEY, RUN = "team:payments", "key:k1", "run:agent-1"
OCT = "2026-10"


def decide(ledger, amount, limits, scopes=(KEY, TEAM)):
    return decide_admit(ledger, scopes=scopes, amount_micro=amount, limits=limits, period=OCT)


def test_admits_when_every_scope_can_hold_and_reports_what_remains():
    ledger = Ledger(IST)
    limits = {TEAM: ScopeLimit(10_000), KEY: ScopeLimit(None)}
    decision = decide(ledger, 4_000, limits)
    assert decision == AdmitDecision(ok=True, remaining={KEY: None, TEAM: 6_000}, soft_crossed=[])


def test_all_or_nothing_names_the_first_short_scope():
    ledger = Ledger(IST)
    ledger.apply(admit("r1", {TEAM: 7_000, KEY: 7_000}))
    limits = {TEAM: ScopeLimit(10_000), KEY: ScopeLimit(100_000)}
    decision = decide(ledger, 3_001, limits)
    assert not decision.ok
    assert (decision.short_scope, decision.reason) == (TEAM, "budget_exhausted")
    assert decision.remaining == {KEY: 93_000, TEAM: 3_000}  # nothing was held
    assert decide(ledger, 3_000, limits).ok  # exactly the rest fits


def test_settled_and_held_both_count():
    ledger = Ledger(IST)
    ledger.apply(admit("r1", {TEAM: 5_000}))
    ledger.apply(settle("r1", {TEAM: 2_000}))
    ledger.apply(admit("r2", {TEAM: 5_000}))
    assert ledger.available(TEAM, OCT, 10_000) == 3_000
    assert not decide(ledger, 3_001, {TEAM: ScopeLimit(10_000)}, scopes=[TEAM]).ok


def test_soft_threshold_is_crossed_once():
    ledger = Ledger(IST)
    limits = {TEAM: ScopeLimit(10_000, soft_pct=80)}
    ledger.apply(admit("r1", {TEAM: 7_999}))
    assert decide(ledger, 0, limits, scopes=[TEAM]).soft_crossed == []
    decision = decide(ledger, 1, limits, scopes=[TEAM])
    assert decision.soft_crossed == [TEAM]
    (notice,) = threshold_events(decision, limits=limits, period=OCT, request_id="r2", currency="INR", now=T0)
    assert (notice.id, notice.spent_micro, notice.limit_micro, notice.threshold_pct) == (
        "team:payments/2026-10/soft", 8_000, 10_000, 80,
    )
    ledger.apply(admit("r2", {TEAM: 1}))
    ledger.apply(notice)
    assert decide(ledger, 1_000, limits, scopes=[TEAM]).soft_crossed == []
    # a new month starts below the threshold again
    assert decide_admit(ledger, scopes=[TEAM], amount_micro=8_000, limits=limits, period="2026-11").soft_crossed == [TEAM]


def test_soft_threshold_with_a_big_first_request():
    ledger = Ledger(IST)
    limits = {TEAM: ScopeLimit(1_000, soft_pct=50), KEY: ScopeLimit(1_000_000, soft_pct=50)}
    assert decide(ledger, 999, limits).soft_crossed == [TEAM]


def test_run_call_cap():
    ledger = Ledger(IST)
    limits = {RUN: ScopeLimit(None, max_calls=2), TEAM: ScopeLimit(10**9)}
    for i in range(2):
        decision = decide(ledger, 10, limits, scopes=[RUN, TEAM])
        assert decision.ok and decision.remaining[RUN] is None
        ledger.apply(admit(f"r{i}", {RUN: 0, TEAM: 10}, at=T0 + timedelta(days=40 * i)))  # across months
    decision = decide(ledger, 10, limits, scopes=[RUN, TEAM])
    assert (decision.ok, decision.short_scope, decision.reason) == (False, RUN, "run_calls_exhausted")


def test_run_money_cap_and_call_cap_together():
    ledger = Ledger(IST)
    limits = {RUN: ScopeLimit(100, max_calls=10)}
    ledger.apply(admit("r0", {RUN: 60}))
    decision = decide(ledger, 50, limits, scopes=[RUN])
    assert (decision.reason, decision.remaining) == ("budget_exhausted", {RUN: 40})


def test_unlimited_scopes_and_no_limits_always_admit():
    ledger = Ledger(IST)
    ledger.apply(admit("r0", {TEAM: 10**12}))
    assert decide(ledger, 10**12, {}).ok
    assert decide(ledger, 10**12, {TEAM: ScopeLimit(None)}).remaining == {KEY: None, TEAM: None}


def test_amount_must_be_non_negative_int():
    with pytest.raises(ValueError):
        decide(Ledger(IST), -1, {})
    with pytest.raises(ValueError):
        decide(Ledger(IST), 1.5, {})


def test_expiries_are_full_deterministic_charges():
    ledger = Ledger(IST)
    ledger.apply(admit("r1", {TEAM: 300, KEY: 300}, ttl_s=60))
    ledger.apply(admit("r2", {TEAM: 200}, ttl_s=600))
    now = T0 + timedelta(seconds=60)
    (expiry,) = decide_expiries(ledger, now)
    assert expiry == HoldExpired(time=now, request_id="r1", team="payments", charged={TEAM: 300, KEY: 300}, currency="INR")
    assert expiry.id == "r1/expired"
    assert decide_expiries(ledger, now) == [expiry]  # same input, same decision
    ledger.apply(expiry)
    assert decide_expiries(ledger, now) == []
    assert [e.request_id for e in decide_expiries(ledger, T0 + timedelta(hours=1))] == ["r2"]


def test_cost_cap():
    assert exceeds_cost_cap(1_001, 1_000)
    assert not exceeds_cost_cap(1_000, 1_000)
    assert not exceeds_cost_cap(10**15, None)
