"""Retention of the request processor's states: what is forgotten, when, and that money never moves.

The model below is the worker's request agent without Kafka: a dict for the
``requests`` table, one ``ClosedRequests`` per partition, ``split`` and
``forget_due`` exactly as ``streams.worker.split`` calls them, ``index_states`` for a
restart. The property test delivers duplicates arbitrarily late (a pod's
spool replayed after any outage) and first deliveries within the retention;
the scope balances must equal those of the same events without duplicates
and without pruning.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st
from ledger_builders import admit, expire, settle

from ledger.leases import ScopeLedger
from ledger.retention import ClosedRequests, admitted_epoch, forget_due, horizon_key, index_states
from ledger.splitting import rebuild_balances, split

UTC = ZoneInfo("UTC")
T0 = datetime(2026, 10, 3, 10, 0, tzinfo=timezone.utc)
R = 3600.0


def ts(dt: datetime) -> float:
    return dt.timestamp()


class RequestProcessor:
    """The request agent's steps over a dict table (what ``streams.worker.split`` does)."""

    def __init__(self, retention_s: float = R, batch: int = 3) -> None:
        self.table: dict = {}
        self.closed: dict[str, ClosedRequests] = {}
        self.scopes: dict[str, ScopeLedger] = {}
        self.offsets: dict[str, int] = {}
        self.retention_s, self.batch = retention_s, batch
        self.stale = 0

    def process(self, event, source: str, now: datetime) -> None:
        offset = self.offsets[source] = self.offsets.get(source, -1) + 1
        index = self.closed.setdefault(source, ClosedRequests(self.retention_s))
        index.observe(ts(event.time), ts(now))
        result = split(event, self.table.get(event.request_id), UTC, source, offset, index.horizon)
        for entry in result.entries:
            self.scopes.setdefault(entry.scope, ScopeLedger(entry.scope)).apply_entry(entry)
        if result.state is not None:
            self.table[event.request_id] = result.state
            if result.state["s"] == "closed":
                index.closed(event.request_id, admitted_epoch(result.state))
        self.stale += result.stale
        if index.has_due():
            forget_due(self.table, index, source, self.batch)

    def restart(self) -> None:
        """Recovery: the table survives (its changelog), everything in memory is rebuilt from it."""
        self.closed, _ = index_states(self.table.items(), self.retention_s)

    def balances(self) -> dict:
        return {s: st.to_dict()["periods"] for s, st in sorted(self.scopes.items())}


def test_clock_follows_event_time_but_never_runs_ahead_of_the_wall_clock():
    index = ClosedRequests(R)
    index.observe(ts(T0), ts(T0 + timedelta(days=1)))
    assert index.clock == ts(T0) and index.horizon == ts(T0) - R
    index.observe(ts(T0 + timedelta(days=30)), ts(T0 + timedelta(hours=2)))  # a pod's clock a month fast
    assert index.clock == ts(T0 + timedelta(hours=2))
    index.observe(ts(T0), ts(T0 + timedelta(hours=3)))  # a late event never moves it back
    assert index.clock == ts(T0 + timedelta(hours=2))


def test_only_states_admitted_before_the_horizon_are_due_a_batch_at_a_time():
    index = ClosedRequests(R)
    for i in range(5):
        index.closed(f"old-{i}", ts(T0) + i)
    index.closed("recent", ts(T0 + timedelta(minutes=50)))
    index.observe(ts(T0 + timedelta(hours=1, minutes=2)), ts(T0 + timedelta(days=1)))
    assert index.has_due()
    first, covered = index.due(3)
    second, covered2 = index.due(3)
    assert sorted(first + second) == [f"old-{i}" for i in range(5)] and len(first) == 3
    assert covered == covered2 == ts(T0) + 60  # the end of the minute they were admitted in
    assert all(covered <= index.horizon for covered in (covered, covered2))
    assert not index.has_due() and index.due(3) == ([], 0.0) and len(index) == 1


def test_a_stale_admit_is_refused_and_a_closed_state_records_its_partition():
    opened = split(admit("r1", {"team:a": 100}, at=T0), None, UTC, "2", 7, horizon=ts(T0))
    assert opened.entries and not opened.stale  # exactly at the horizon: accepted
    closed = split(settle("r1", {"team:a": 60}, {"team:a": 100}, at=T0), opened.state, UTC, "2", 8)
    assert closed.state == {"s": "closed", "at": opened.state["at"], "src": "2"}
    late = split(admit("r2", {"team:a": 100}, at=T0 - timedelta(seconds=1)), None, UTC, "2", 9, horizon=ts(T0))
    assert late.stale and late.entries == [] and late.state is None
    known = split(admit("r1", {"team:a": 100}, at=T0 - timedelta(days=1)), closed.state, UTC, "2", 10, ts(T0))
    assert known.entries == [] and not known.stale  # a duplicate of a remembered request: plain no-op


def test_forgetting_writes_the_horizon_first_and_a_restart_still_refuses_duplicates():
    proc = RequestProcessor()
    for i in range(4):
        proc.process(admit(f"r{i}", {"team:a": 100}, at=T0), "0", T0)
        proc.process(settle(f"r{i}", {"team:a": 70}, {"team:a": 100}, at=T0), "0", T0)
    proc.process(admit("fresh", {"team:a": 100}, at=T0 + timedelta(hours=2)), "0", T0 + timedelta(hours=2))
    proc.process(settle("fresh", {"team:a": 70}, {"team:a": 100}, at=T0 + timedelta(hours=2)), "0",
                 T0 + timedelta(hours=2))
    assert not any(f"r{i}" in proc.table for i in range(4))  # batch 3: two events were enough
    assert proc.table[horizon_key("0")] == {"s": "horizon", "t": ts(T0) + 60}
    before = proc.balances()
    proc.restart()
    assert proc.closed["0"].floor == ts(T0) + 60
    proc.process(admit("r1", {"team:a": 100}, at=T0), "0", T0 + timedelta(hours=2))  # a spool's late duplicate
    proc.process(settle("r1", {"team:a": 70}, {"team:a": 100}, at=T0), "0", T0 + timedelta(hours=2))
    proc.process(admit("fresh", {"team:a": 100}, at=T0 + timedelta(hours=2)), "0", T0 + timedelta(hours=2))
    assert proc.balances() == before and proc.stale == 1


def test_an_expiry_then_a_late_settlement_of_a_forgotten_request_stays_charged_in_full():
    proc = RequestProcessor(batch=10)
    proc.process(admit("r", {"team:a": 100}, at=T0), "1", T0)
    proc.process(expire("r", {"team:a": 100}, at=T0 + timedelta(minutes=15)), "1", T0 + timedelta(minutes=15))
    proc.process(admit("other", {"team:a": 5}, at=T0 + timedelta(hours=3)), "1", T0 + timedelta(hours=3))
    assert "r" not in proc.table
    proc.process(settle("r", {"team:a": 10}, {"team:a": 100}, at=T0), "1", T0 + timedelta(hours=3))
    totals = proc.scopes["team:a"].totals("2026-10")
    assert (totals.settled, totals.held, totals.requests) == (100, 5, 2)


def test_index_states_rebuilds_each_owned_partition_and_skips_unplaceable_states():
    table = {
        "a": {"s": "closed", "at": "2026-10-03T10:00:00.000000Z", "src": "0"},
        "b": {"s": "closed", "at": "2026-10-03T10:00:30.000000Z", "src": "1"},
        "legacy": {"s": "closed", "at": "2026-10-03T10:00:00.000000Z"},
        "o": {"s": "open", "at": "2026-10-03T10:00:00.000000Z"},
        "o0": {"s": "open", "at": "2026-10-03T10:00:00.000000Z", "src": "0"},
        "o1": {"s": "open", "at": "2026-10-03T10:00:00.000000Z", "src": "1"},
        horizon_key("0"): {"s": "horizon", "t": 123.0},
    }
    indexes, opened = index_states(table.items(), R, sources={"0"})
    assert set(indexes) == {"0"} and len(indexes["0"]) == 1 and indexes["0"].floor == 123.0
    assert sorted(opened) == ["o", "o0"]  # o1's partition moved to another worker


# --- the property: duplicates never count twice, pruning never changes money ----------------------

@st.composite
def deliveries(draw):
    """Requests on two partitions, admitted over ~5 h; each delivered late by up to R/2 (a spool), each
    admit or close possibly duplicated any time later (up to 10 h), with restarts in between."""
    n = draw(st.integers(1, 25))
    plan = []
    for i in range(n):
        at = T0 + timedelta(seconds=draw(st.integers(0, 5 * 3600)))
        team = draw(st.sampled_from(["a", "b"]))
        hold = draw(st.integers(1, 1000))
        cost = draw(st.integers(0, 1200))
        lag = timedelta(seconds=draw(st.integers(0, int(R / 2))))
        opened = admit(f"r{i}", {f"team:{team}": hold}, at=at, team=team)
        if draw(st.booleans()):
            closing = settle(f"r{i}", {f"team:{team}": cost}, {f"team:{team}": hold}, at=at, team=team)
        else:
            closing = expire(f"r{i}", {f"team:{team}": hold}, at=at + timedelta(minutes=15), team=team)
        plan += [(at + lag, 0, opened), (closing.time + lag, 1, closing)]
        for event in (opened, closing):
            if draw(st.booleans()):
                plan.append((event.time + lag + timedelta(seconds=draw(st.integers(1, 10 * 3600))), 2, event))
    restarts = draw(st.lists(st.integers(0, len(plan)), max_size=3))
    return sorted(plan, key=lambda p: (p[0], p[1], p[2].id)), set(restarts)


@settings(max_examples=150, deadline=None)
@given(deliveries())
def test_pruning_and_late_duplicates_leave_balances_exactly_as_without_them(case):
    plan, restarts = case
    proc = RequestProcessor(batch=2)
    firsts: dict = {}
    for step, (arrives, _, event) in enumerate(plan):
        if step in restarts:
            proc.restart()
        firsts.setdefault(event.id, event)
        proc.process(event, "0" if event.team == "a" else "1", arrives)
    expected = rebuild_balances(sorted(firsts.values(), key=lambda e: (e.time, e.type != "request.admitted")), UTC)
    assert proc.balances() == {s: st.to_dict()["periods"] for s, st in sorted(expected.items())}
    # what is still remembered is what the clock has not yet passed by the retention (a batch at a time)
    for index in proc.closed.values():
        assert not index.has_due() or len(index) > 0
