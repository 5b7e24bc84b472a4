"""Closed request ids kept per month or for a window (``ledger.closed_ids``): a duplicate admit changes nothing
while its id is kept, the window's memory stays flat however many requests close, and the state neither depends
on the order the closes were folded in nor changes across a checkpoint."""

from datetime import timedelta

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ledger_builders import IST, T0, admit, settle

from ledger.balances import Ledger, ScopeBalance
from ledger.closed_ids import ClosedIds

TEAM = "team:payments"
HOLDS = {TEAM: 1_000}


def _close(ledger: Ledger, request_id: str, at) -> None:
    assert ledger.apply(admit(request_id, HOLDS, at=at))
    assert ledger.apply(settle(request_id, {TEAM: 400}, HOLDS, at=at + timedelta(seconds=1)))


def test_a_duplicate_admit_within_the_window_changes_nothing():
    ledger = Ledger(IST, closed_keep_s=600)
    _close(ledger, "r1", T0)
    _close(ledger, "r2", T0 + timedelta(minutes=9))
    assert not ledger.apply(admit("r1", HOLDS, at=T0))  # the log's re-read of an event already folded
    assert ledger.is_closed("r1", "2026-10")
    assert ledger.balance(TEAM, "2026-10") == ScopeBalance(settled=800, held=0, overrun=0, requests=2)


def test_the_window_forgets_ids_closed_longer_ago_and_its_memory_stays_flat():
    ledger = Ledger(IST, closed_keep_s=600)
    sizes = []
    for i in range(3_000):  # one request closing every second for 50 minutes
        _close(ledger, f"r{i}", T0 + timedelta(seconds=i))
        sizes.append(ledger.closed_count)
    assert not ledger.is_closed("r0", "2026-10")  # closed 50 minutes before the latest close
    assert ledger.is_closed("r2999", "2026-10") and ledger.is_closed("r2400", "2026-10")
    assert max(sizes[1_200:]) <= 11 * 60 + 1  # eleven minutes of closes at most, however long it runs
    month = Ledger(IST)  # the month mode keeps them all
    for i in range(3_000):
        _close(month, f"r{i}", T0 + timedelta(seconds=i))
    assert month.closed_count == 3_000 and month.is_closed("r0", "2026-10")
    assert month.balance(TEAM, "2026-10") == ledger.balance(TEAM, "2026-10")  # money the same either way


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=40 * 60), min_size=1, max_size=60), st.randoms())
def test_the_window_does_not_depend_on_the_order_closes_are_folded_in(seconds, rnd):
    closes = [(f"r{i}", T0 + timedelta(seconds=s)) for i, s in enumerate(seconds)]
    shuffled = list(closes)
    rnd.shuffle(shuffled)
    one, other = ClosedIds(600), ClosedIds(600)
    for request_id, at in closes:
        one.add(request_id, "2026-10", at)
    for request_id, at in shuffled:
        other.add(request_id, "2026-10", at)
    assert one.state() == other.state()
    newest = max(int(at.timestamp()) // 60 for _, at in closes)
    kept = {rid for rid, at in closes if int(at.timestamp()) // 60 >= newest - 10}
    assert {rid for rid, _ in closes if one.has(rid, "2026-10")} == kept


def test_a_checkpoint_keeps_the_window_and_an_older_checkpoint_is_read_as_the_month_mode():
    ledger = Ledger(IST, closed_keep_s=600)
    for i in range(30):
        _close(ledger, f"r{i}", T0 + timedelta(minutes=i))
    restored = Ledger.from_bytes(ledger.to_bytes())
    assert restored.to_bytes() == ledger.to_bytes()
    _close(ledger, "later", T0 + timedelta(minutes=31))
    _close(restored, "later", T0 + timedelta(minutes=31))
    assert restored.to_bytes() == ledger.to_bytes()  # the rebuilt ledger folds on exactly like the live one
    state = orjson.loads(ledger.to_bytes())
    assert state["closed_keep_s"] == 600 and state["closed"] == {}
    # a format-2 checkpoint (the month mode, before the window): read as such, then switched to the window
    old = Ledger(IST)
    for i in range(5):
        _close(old, f"o{i}", T0 + timedelta(minutes=i))
    state = orjson.loads(old.to_bytes())
    state["format"] = 2
    assert "closed_keep_s" not in state
    reread = Ledger.from_bytes(orjson.dumps(state))
    assert reread.closed_count == 5 and reread.is_closed("o4", "2026-10")
    reread.keep_closed_for(600, T0 + timedelta(minutes=5))
    assert reread.is_closed("o0", "2026-10")  # carried as closed at the switch ...
    _close(reread, "n1", T0 + timedelta(minutes=16))
    assert not reread.is_closed("o0", "2026-10") and reread.is_closed("n1", "2026-10")  # ... and forgotten after


def test_a_window_shorter_than_a_minute_is_refused():
    for bad in (0, 59):
        with pytest.raises(ValueError, match="at least a minute"):
            ClosedIds(bad)


def test_the_month_mode_forgets_whole_months_on_prune():
    closed = ClosedIds()
    closed.add("a", "2026-09", T0)
    closed.add("b", "2026-10", T0)
    closed.prune("2026-10")
    assert not closed.has("a", "2026-09") and closed.has("b", "2026-10") and len(closed) == 1
