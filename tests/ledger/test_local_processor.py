"""The owner's ledger processor (``serve --workers N``), pure: the same folds as the distributed worker,
in log order, with the expiries and notices it decides."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from ledger.events import HoldExpired, LeaseGranted, LeaseRequested, RequestAdmitted, RequestSettled
from ledger.leases import LeasePolicy
from ledger.local_processor import LocalProcessor
from ledger.notices import BudgetThresholdCrossed
from ledger.periods import period_of
from ledger.usage import TokenUsage

UTC = ZoneInfo("UTC")
T = datetime(2026, 12, 4, 10, 0, tzinfo=timezone.utc)
SCOPE = "team:alpha"
PERIOD = period_of(T, UTC)


def _processor(limit: int = 1_000_000, **kw) -> LocalProcessor:  # type: ignore[no-untyped-def]
    return LocalProcessor(UTC, lambda s: limit if s == SCOPE else None, lambda s: 50, lambda: "INR",
                          LeasePolicy(share=2, last_pct=5, ttl_s=60, expiry_grace_s=5), **kw)


def _admitted(rid: str, hold: int, at: datetime = T, lease: str | None = None, ttl_s: int = 30) -> RequestAdmitted:
    return RequestAdmitted(time=at, request_id=rid, team="alpha", key_id="k", business_unit="bu", app="a",
                           run_id=None, alias="chat", data_class="internal", est_input_tokens=1, max_output_tokens=1,
                           holds={SCOPE: hold}, currency="INR", price_version=1, pod="p1", hold_ttl_s=ttl_s,
                           stream=False, leases={SCOPE: lease} if lease else {})


def _settled(rid: str, charge: int, hold: int, at: datetime = T) -> RequestSettled:
    return RequestSettled(time=at, request_id=rid, team="alpha", final_status=200, attempts=1, deployment="d",
                          usage=TokenUsage(input=1, output=1), cost_micro=charge, currency="INR",
                          cost_by_scope={SCOPE: charge}, hold_released={SCOPE: hold - charge}, overrun_micro=0,
                          cache_hit=False, latency_ms=1)


def test_an_ask_is_granted_and_the_grant_coming_back_changes_nothing():
    p = _processor()
    ask = LeaseRequested(time=T, lease_id="l1", scope=SCOPE, pod="p1", amount_micro=10_000, expires_at=None)
    (granted,) = p.apply(ask, 1, T.timestamp())
    assert isinstance(granted, LeaseGranted) and granted.pod == "p1" and granted.amount_micro >= 10_000
    assert p.take_dirty() == {SCOPE}
    assert p.apply(granted, 2, T.timestamp()) == [] and not p.take_dirty()
    assert p.scope(SCOPE).totals(PERIOD).leased == granted.amount_micro
    row = p.row(SCOPE, T)
    assert (row["leased"], row["limit"], row["state"]) == (str(granted.amount_micro), "1000000", "ok")


def test_an_event_at_an_offset_already_folded_changes_nothing():
    p = _processor()
    p.apply(_admitted("r1", 5_000), 1, T.timestamp())
    assert p.apply(_admitted("r2", 7_000), 1, T.timestamp()) == []  # a duplicate acked with an old offset
    assert p.scope(SCOPE).totals(PERIOD).held == 5_000


def test_an_open_hold_past_its_ttl_is_charged_in_full_once():
    p = _processor()
    p.apply(_admitted("r1", 5_000, ttl_s=30), 1, T.timestamp())
    p.apply(_admitted("r2", 3_000, ttl_s=30), 2, T.timestamp())
    p.apply(_settled("r2", 1_000, 3_000), 3, T.timestamp())
    assert p.due(T + timedelta(seconds=29)) == []
    (expired,) = p.due(T + timedelta(seconds=31))
    assert isinstance(expired, HoldExpired) and (expired.request_id, expired.charged) == ("r1", {SCOPE: 5_000})
    p.apply(expired, 4, T.timestamp())
    assert p.due(T + timedelta(seconds=60)) == []
    t = p.scope(SCOPE).totals(PERIOD)
    assert (t.settled, t.held, t.requests) == (6_000, 0, 2)


def test_crossing_the_soft_threshold_decides_one_notice():
    p = _processor(limit=10_000)
    assert p.apply(_admitted("r1", 4_000), 1, T.timestamp()) == []
    (notice,) = p.apply(_admitted("r2", 2_000), 2, T.timestamp())  # 6,000 of 10,000 at a soft 50%
    assert isinstance(notice, BudgetThresholdCrossed) and notice.scope == SCOPE
    p.apply(notice, 3, T.timestamp())
    assert p.apply(_admitted("r3", 1_000), 4, T.timestamp()) == []
    assert p.row(SCOPE, T)["state"] == "soft"


def test_closed_requests_are_forgotten_past_retention_and_a_late_duplicate_is_stale():
    p = _processor(retention_s=3600)
    p.apply(_admitted("r1", 5_000), 1, T.timestamp())
    p.apply(_settled("r1", 5_000, 5_000), 2, T.timestamp())
    later = T + timedelta(hours=3)
    for i in range(3, 300):  # newer traffic moves the log's clock past the horizon
        p.apply(_admitted(f"n{i}", 1, at=later), i, later.timestamp())
    assert "r1" not in p.requests
    p.apply(_admitted("r1", 5_000), 400, later.timestamp())  # a duplicate of a forgotten request
    assert "r1" not in p.open and p.scope(SCOPE).totals(PERIOD).settled == 5_000
