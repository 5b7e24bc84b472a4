from datetime import datetime, timedelta, timezone

import orjson
import pytest
from ledger_builders import IST, T0, admit, attempt, correct, expire, settle

from ledger.balances import Hold, Ledger, ScopeBalance
from ledger.errors import CheckpointError
from ledger.events import BudgetThresholdCrossed, LeaseGranted

TEAM, KEY = "team:payments", "key:k1"
HOLDS = {TEAM: 1_000, KEY: 1_000}


def test_admit_holds_and_settle_replaces_the_hold_by_the_cost():
    ledger = Ledger(IST)
    assert ledger.apply(admit("r1", HOLDS))
    assert ledger.balance(TEAM, "2026-10") == ScopeBalance(settled=0, held=1_000, overrun=0, requests=1)
    assert ledger.available(TEAM, "2026-10", 5_000) == 4_000
    assert not ledger.apply(attempt("r1", 400))
    assert ledger.apply(settle("r1", {TEAM: 400, KEY: 400}, HOLDS))
    assert ledger.balance(TEAM, "2026-10") == ScopeBalance(settled=400, held=0, overrun=0, requests=1)
    assert ledger.balance(KEY, "2026-10").spent == 400
    assert ledger.open_holds() == []
    assert ledger.is_closed("r1", "2026-10")


def test_overrun_is_recorded_per_scope():
    ledger = Ledger(IST)
    ledger.apply(admit("r1", HOLDS))
    ledger.apply(settle("r1", {TEAM: 1_300, KEY: 1_300}, HOLDS))
    assert ledger.balance(TEAM, "2026-10") == ScopeBalance(settled=1_300, held=0, overrun=300, requests=1)
    assert ledger.available(TEAM, "2026-10", 1_000) == -300


def test_settlement_is_charged_to_the_month_of_admission():
    admitted_at = datetime(2026, 11, 30, 18, 29, tzinfo=timezone.utc)  # 23:59 IST, 30 November
    ledger = Ledger(IST)
    ledger.apply(admit("r1", HOLDS, at=admitted_at))
    ledger.apply(settle("r1", {TEAM: 700, KEY: 700}, HOLDS, at=admitted_at + timedelta(minutes=5)))
    assert ledger.balance(TEAM, "2026-11").settled == 700
    assert ledger.balance(TEAM, "2026-12") == ScopeBalance()


def test_admission_after_midnight_ist_is_next_month():
    ledger = Ledger(IST)
    ledger.apply(admit("r1", HOLDS, at=datetime(2026, 11, 30, 19, 0, tzinfo=timezone.utc)))
    assert ledger.balance(TEAM, "2026-12").held == 1_000
    assert ledger.open_holds()[0].period == "2026-12"


def test_expiry_charges_the_full_hold():
    ledger = Ledger(IST)
    ledger.apply(admit("r1", HOLDS, ttl_s=900))
    assert ledger.expired_holds(T0 + timedelta(seconds=899)) == []
    (hold,) = ledger.expired_holds(T0 + timedelta(seconds=900))
    assert hold == Hold("r1", "2026-10", HOLDS, T0, 900, "payments", "INR")
    assert ledger.apply(expire("r1", HOLDS, at=T0 + timedelta(seconds=900)))
    assert ledger.balance(TEAM, "2026-10") == ScopeBalance(settled=1_000, held=0, overrun=0, requests=1)
    assert ledger.expired_holds(T0 + timedelta(days=1)) == []


def test_duplicates_and_late_events_change_nothing():
    ledger = Ledger(IST)
    events = [admit("r1", HOLDS), settle("r1", {TEAM: 10, KEY: 10}, HOLDS)]
    for event in events:
        ledger.apply(event)
    before = ledger.to_bytes()
    assert not ledger.apply(events[0])  # a re-delivered admit after settlement
    assert not ledger.apply(events[1])  # settling twice equals settling once
    assert not ledger.apply(expire("r1", HOLDS))  # the sweeper raced the settlement
    assert not ledger.apply(settle("ghost", {TEAM: 10}))  # never admitted here
    assert not ledger.apply(expire("ghost", {TEAM: 10}))
    assert ledger.to_bytes() == before


def test_settling_an_expired_request_changes_nothing():
    ledger = Ledger(IST)
    ledger.apply(admit("r1", HOLDS))
    ledger.apply(expire("r1", HOLDS))
    assert not ledger.apply(settle("r1", {TEAM: 10, KEY: 10}, HOLDS))
    assert ledger.balance(TEAM, "2026-10").settled == 1_000


def test_admit_of_an_open_request_changes_nothing():
    ledger = Ledger(IST)
    ledger.apply(admit("r1", HOLDS))
    assert not ledger.apply(admit("r1", HOLDS))
    assert ledger.balance(TEAM, "2026-10").requests == 1


def test_lease_and_config_events_are_not_balances_yet():
    ledger = Ledger(IST)
    lease = LeaseGranted(time=T0, lease_id="L", scope=TEAM, pod="p", amount_micro=5, expires_at=T0)
    assert not ledger.apply(lease)
    assert ledger.balances() == {}


def test_threshold_mark_is_applied_once():
    ledger = Ledger(IST)
    notice = BudgetThresholdCrossed(
        time=T0, request_id="r1", scope=TEAM, period="2026-10", limit_micro=100, spent_micro=80,
        threshold_pct=80, currency="INR",
    )
    assert not ledger.threshold_crossed(TEAM, "2026-10")
    assert ledger.apply(notice)
    assert not ledger.apply(notice)
    assert ledger.threshold_crossed(TEAM, "2026-10")
    assert not ledger.threshold_crossed(TEAM, "2026-11")


def test_run_scopes_span_months():
    ledger = Ledger(IST)
    run = "run:agent-7"
    ledger.apply(admit("r1", {run: 100}, at=datetime(2026, 11, 30, 18, 0, tzinfo=timezone.utc)))
    ledger.apply(admit("r2", {run: 100}, at=datetime(2026, 11, 30, 19, 0, tzinfo=timezone.utc)))
    assert ledger.balance(run, "2026-11") == ledger.balance(run, "2026-12") == ScopeBalance(held=200, requests=2)


def test_prune_bounds_memory_and_refuses_stale_admits():
    ledger = Ledger(IST)
    october, november = T0, T0 + timedelta(days=31)
    ledger.apply(admit("old", HOLDS, at=october))
    ledger.apply(settle("old", {TEAM: 5, KEY: 5}, HOLDS, at=october))
    ledger.apply(admit("slow", HOLDS, at=october, ttl_s=10**8))  # still open at prune time
    ledger.apply(admit("run-call", {"run:a": 1}, at=october))
    ledger.apply(settle("run-call", {"run:a": 1}, at=october))
    ledger.apply(admit("new", HOLDS, at=november))
    ledger.prune("2026-11")
    assert ledger.horizon == "2026-11"
    assert not ledger.is_closed("old", "2026-10")
    assert not ledger.apply(admit("old", HOLDS, at=october))  # a late duplicate cannot reopen it
    assert ledger.balance(TEAM, "2026-10").held == 1_000  # the open hold keeps its balance
    assert ledger.balance("run:a", "2026-11") == ScopeBalance()  # idle run forgotten
    assert ledger.apply(settle("slow", {TEAM: 7, KEY: 7}, HOLDS, at=november))
    assert ledger.balance(TEAM, "2026-10") == ScopeBalance(settled=12, held=0, overrun=0, requests=2)
    assert ledger.balance(TEAM, "2026-11").held == 1_000
    ledger.prune("2026-10")  # never moves back
    assert ledger.horizon == "2026-11"


def test_checkpoint_round_trip_is_exact():
    ledger = Ledger(IST)
    ledger.apply(admit("r1", HOLDS))
    ledger.apply(admit("r2", {TEAM: 3, "run:x": 3}, at=T0 + timedelta(seconds=1)))
    ledger.apply(settle("r1", {TEAM: 1_200, KEY: 900}, HOLDS))
    ledger.prune("2026-09")
    copy = Ledger.from_bytes(ledger.to_bytes())
    assert copy.to_bytes() == ledger.to_bytes()
    assert copy.balances() == ledger.balances()
    assert copy.open_holds() == ledger.open_holds()
    assert copy.tz.key == "Asia/Kolkata"
    assert not copy.apply(admit("r1", HOLDS))
    assert copy.apply(settle("r2", {TEAM: 1, "run:x": 1}))


@pytest.mark.parametrize(
    "blob",
    [b"nope", b"[]", orjson.dumps({"format": 99}), orjson.dumps({"format": 1, "tz": "Asia/Kolkata"}),
     orjson.dumps({"format": 1, "tz": "Mars/Olympus", "horizon": "", "balances": [], "holds": [],
                   "closed": {}, "soft": []})],
)
def test_unreadable_checkpoints_are_refused_clearly(blob):
    with pytest.raises(CheckpointError):
        Ledger.from_bytes(blob)


def test_prune_for_keeps_the_current_and_previous_month() -> None:
    from datetime import datetime, timezone
    from zoneinfo import ZoneInfo

    from ledger.balances import Ledger

    ledger = Ledger(ZoneInfo("Asia/Kolkata"))
    assert ledger.prune_for(datetime(2026, 11, 10, tzinfo=timezone.utc))
    assert ledger.horizon == "2026-10"
    assert not ledger.prune_for(datetime(2026, 11, 29, tzinfo=timezone.utc))  # same month: nothing to do
    # 2026-11-30T19:00Z is December in Kolkata
    assert ledger.prune_for(datetime(2026, 11, 30, 19, 0, tzinfo=timezone.utc))
    assert ledger.horizon == "2026-11"


# --- re-rating corrections ----------------------------------------------------------


def test_a_correction_moves_settled_money_in_the_admission_month():
    at = datetime(2026, 10, 31, 19, 0, tzinfo=timezone.utc)  # already November in Kolkata
    ledger = Ledger(IST)
    ledger.apply(admit("r1", HOLDS, at=at))
    ledger.apply(settle("r1", {TEAM: 900, KEY: 900}, HOLDS, at=at))
    fix = correct("r1", {TEAM: 900, KEY: 900}, {TEAM: 90, KEY: 90}, admitted_at=at,
                  at=datetime(2026, 12, 5, tzinfo=timezone.utc))
    assert ledger.apply(fix)
    assert ledger.balance(TEAM, "2026-11") == ScopeBalance(settled=90, held=0, overrun=0, requests=1, corrected=-810)
    assert ledger.balance(TEAM, "2026-12") == ScopeBalance()
    before = ledger.to_bytes()
    assert not ledger.apply(fix)  # the same correction again changes nothing
    assert ledger.to_bytes() == before


def test_a_second_correction_is_relative_to_the_first():
    """v2 charged 900; re-rated to v3 (90), then to v4 (120): the ledger ends at the v4 cost."""
    ledger = Ledger(IST)
    ledger.apply(admit("r1", HOLDS))
    ledger.apply(settle("r1", {TEAM: 900, KEY: 900}, HOLDS))
    to_v3 = correct("r1", {TEAM: 900, KEY: 900}, {TEAM: 90, KEY: 90}, sequence=1, versions=(2, 3))
    to_v4 = correct("r1", {TEAM: 90, KEY: 90}, {TEAM: 120, KEY: 120}, sequence=2, versions=(3, 4))
    assert to_v3.id != to_v4.id
    for event in (to_v3, to_v4, to_v3, to_v4):
        ledger.apply(event)
    assert ledger.balance(TEAM, "2026-10") == ScopeBalance(settled=120, held=0, overrun=0, requests=1, corrected=-780)
    back_to_v3 = correct("r1", {TEAM: 120, KEY: 120}, {TEAM: 90, KEY: 90}, sequence=3, versions=(4, 3))
    assert ledger.apply(back_to_v3)  # going back is the next link of the chain, not a duplicate of the first
    assert ledger.balance(KEY, "2026-10").settled == 90


def test_corrections_survive_checkpoints_and_are_forgotten_with_their_month():
    ledger = Ledger(IST)
    ledger.apply(admit("r1", HOLDS))
    ledger.apply(settle("r1", {TEAM: 900}, HOLDS))
    fix = correct("r1", {TEAM: 900}, {TEAM: 1_000})
    ledger.apply(fix)
    copy = Ledger.from_bytes(ledger.to_bytes())
    assert copy.to_bytes() == ledger.to_bytes()
    assert not copy.apply(fix)
    assert copy.balance(TEAM, "2026-10").corrected == 100
    copy.prune("2026-12")
    assert not copy.apply(fix)  # its month is gone: ignored like a stale admit, never applied a second time
    assert b"r1/rerate/1" not in copy.to_bytes()


def test_format_1_checkpoints_are_read_as_without_corrections():
    ledger = Ledger(IST)
    ledger.apply(admit("r1", HOLDS))
    state = orjson.loads(ledger.to_bytes())
    state["format"] = 1
    state["balances"] = [row[:7] for row in state["balances"]]
    del state["corrections"]
    old = Ledger.from_bytes(orjson.dumps(state))
    assert old.to_bytes() == ledger.to_bytes()
