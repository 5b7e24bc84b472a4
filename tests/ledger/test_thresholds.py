"""The distributed soft-threshold notice and budget state: once per scope and period, as in embedded mode."""

from __future__ import annotations

from datetime import timedelta
from zoneinfo import ZoneInfo

from ledger_builders import T0, admit, settle

from ledger.admission import ScopeLimit, decide_admit, threshold_events
from ledger.balances import Ledger
from ledger.events import BudgetThresholdCrossed, LeaseGranted
from ledger.leases import ScopeLedger
from ledger.splitting import split
from ledger.thresholds import apply_notice, budget_state, decide_soft_notice

UTC = ZoneInfo("UTC")
LIMIT = 1000


def folded(state: ScopeLedger, events, offset: int = 0) -> list[BudgetThresholdCrossed]:
    """Split request events into entries, fold them into ``state``, collect the notices decided."""
    notices, requests = [], {}
    for i, event in enumerate(events):
        result = split(event, requests.get(event.request_id), UTC, "0", offset + i)
        if result.state is not None:
            requests[event.request_id] = result.state
        for entry in result.entries:
            if entry.scope == state.scope and state.apply_entry(entry):
                notice = decide_soft_notice(state, entry, LIMIT, 80, "INR")
                if notice is not None:
                    notices.append(notice)
    return notices


def test_the_notice_comes_once_when_settled_plus_held_reaches_the_soft_pct():
    state = ScopeLedger("team:a")
    assert folded(state, [admit("r1", {"team:a": 700}), settle("r1", {"team:a": 700}, {"team:a": 700})]) == []
    notices = folded(state, [admit("r2", {"team:a": 100}), admit("r3", {"team:a": 100})], offset=2)
    assert [(n.request_id, n.spent_micro, n.period, n.threshold_pct, n.id) for n in notices] == [
        ("r2", 800, "2026-10", 80, "team:a/2026-10/soft")]
    assert state.soft_crossed == {"2026-10"}
    assert budget_state(state, "2026-10", LIMIT, 80) == "soft"
    assert budget_state(state, "2026-11", LIMIT, 80) == "ok"  # a new month starts over


def test_an_overrun_at_settlement_can_cross_too_and_unlimited_scopes_never_do():
    state = ScopeLedger("team:a")
    notices = folded(state, [admit("r1", {"team:a": 100}), settle("r1", {"team:a": 900}, {"team:a": 100})])
    assert [n.spent_micro for n in notices] == [900]
    entry = split(admit("r2", {"team:a": 10}), None, UTC, "0", 5).entries[0]
    state.apply_entry(entry)
    assert decide_soft_notice(state, entry, None, 80, "INR") is None


def test_the_same_decision_as_embedded_mode_for_the_same_admissions():
    holds = [300, 300, 250, 100, 40]
    ledger, embedded = Ledger(UTC), []
    limits = {"team:a": ScopeLimit(LIMIT, soft_pct=80)}
    for i, hold in enumerate(holds):
        decision = decide_admit(ledger, scopes=["team:a"], amount_micro=hold, limits=limits, period="2026-10")
        notices = threshold_events(decision, limits=limits, period="2026-10", request_id=f"r{i}", currency="INR",
                                   now=T0)
        ledger.apply(admit(f"r{i}", {"team:a": hold}))
        for notice in notices:
            ledger.apply(notice)
        embedded += notices
    distributed = folded(ScopeLedger("team:a"), [admit(f"r{i}", {"team:a": h}) for i, h in enumerate(holds)])
    assert [(n.id, n.request_id, n.spent_micro) for n in distributed] == [
        (n.id, n.request_id, n.spent_micro) for n in embedded]


def test_the_mark_survives_the_table_value_and_old_values_read_without_it():
    state = ScopeLedger("team:a")
    folded(state, [admit("r1", {"team:a": 900})])
    again = ScopeLedger.from_dict(state.to_dict())
    assert again.soft_crossed == {"2026-10"}
    assert folded(again, [admit("r2", {"team:a": 50})], offset=1) == []  # restart: no second notice
    old = state.to_dict()
    del old["soft_crossed"]  # a value written before notices existed
    assert ScopeLedger.from_dict(old).soft_crossed == set()


def test_a_notice_read_back_only_marks_and_a_run_keeps_one_mark_for_its_life():
    state = ScopeLedger("team:a")
    notice = BudgetThresholdCrossed(time=T0, request_id="r", scope="team:a", period="2026-10", limit_micro=LIMIT,
                                    spent_micro=800, threshold_pct=80, currency="INR")
    assert apply_notice(state, notice) and not apply_notice(state, notice)
    assert folded(state, [admit("r1", {"team:a": 900})]) == []
    run = ScopeLedger("run:x")
    assert len(folded(run, [admit("r1", {"run:x": 900})])) == 1
    assert folded(run, [admit("r2", {"run:x": 10}, at=T0 + timedelta(days=40))], offset=1) == []
    run.prune("2027-01")
    assert run.soft_crossed == {"run"}


def test_budget_state_is_hard_when_leases_take_the_rest():
    state = ScopeLedger("team:a")
    grant = LeaseGranted(time=T0, lease_id="l1", scope="team:a", pod="p", amount_micro=LIMIT,
                         expires_at=T0 + timedelta(minutes=1))
    state.apply_lease(grant, UTC)
    assert budget_state(state, "2026-10", LIMIT, 80) == "hard"
    assert budget_state(state, "2026-10", None, 80) == "ok"
    assert budget_state(ScopeLedger("team:b"), "2026-10", 0, 80) == "hard"
    assert budget_state(ScopeLedger("team:b"), "2026-10", LIMIT, 80) == "ok"
