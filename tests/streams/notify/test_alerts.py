"""The alert rules (pure): which events raise which alert, with which id, and the cost-anomaly detector."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from ledger.events import BudgetThresholdCrossed, ConfigRollout, RequestSettled
from ledger.reconcile_events import ReconcileReported
from ledger.refusals import RequestRefused
from ledger.usage import TokenUsage
from streams.notify.alerts import CostAnomaly, ExpiringKey, alert_of, keys_near_expiry

T = datetime(2026, 11, 10, 10, 15, 2, tzinfo=timezone.utc)


def crossed(scope: str = "team:payments") -> BudgetThresholdCrossed:
    return BudgetThresholdCrossed(time=T, request_id="req-9", scope=scope, period="2026-11", limit_micro=10_000_000,
                                  spent_micro=8_100_000, threshold_pct=80, currency="INR")


def refused(request_id: str = "req-1", code: str = "budget_exhausted", at: datetime = T) -> RequestRefused:
    return RequestRefused(time=at, request_id=request_id, team="payments", key_id="fb-pay-1", business_unit="retail",
                          app="checkout", run_id=None, alias="chat-default", est_input_tokens=10, max_output_tokens=10,
                          holds={"key:fb-pay-1": 1, "team:payments": 1}, currency="INR", price_version=1, pod="p",
                          error_code=code, scope="team:payments")


def reported(flagged: int) -> ReconcileReported:
    return ReconcileReported(time=T, day="2026-11-09", accounts="acct-a,acct-b", content_hash="ab" * 32, rows=12,
                             flagged=flagged, threshold_percent="1")


def settled(request_id: str, at: datetime, cost: int) -> RequestSettled:
    return RequestSettled(time=at, request_id=request_id, team="payments", final_status=200, attempts=1,
                          deployment="d", usage=TokenUsage(input=1, output=1), cost_micro=cost, currency="INR",
                          cost_by_scope={"team:payments": cost}, hold_released={"team:payments": cost},
                          overrun_micro=0, cache_hit=False, latency_ms=10)


def test_soft_threshold_hard_limit_and_drift_become_alerts_with_stable_ids() -> None:
    soft = alert_of(crossed())
    assert soft is not None and soft.kind == "budget.soft_threshold" and soft.id == crossed().id
    assert "81%" in soft.summary and soft.details["spent_micro"] == 8_100_000
    hard = [alert_of(refused("req-1")), alert_of(refused("req-2", at=T + timedelta(hours=3)))]
    assert hard[0] is not None and hard[0].kind == "budget.hard_limit" and hard[0].severity == "critical"
    assert hard[0].id == hard[1].id == "hard_limit/team:payments/2026-11"  # one alert per scope and month
    assert alert_of(refused(code="budget_reserved")) is None  # a wait that ran out is not the hard limit
    drift = alert_of(reported(3))
    assert drift is not None and drift.kind == "reconcile.drift" and drift.id == reported(3).id
    assert alert_of(reported(0)) is None
    assert alert_of(settled("r", T, 5)) is None


def test_keys_near_expiry_warn_once_per_expiry_and_not_after_or_too_early() -> None:
    now = T
    keys = [ExpiringKey("fb-soon", "payments", "checkout", (now + timedelta(days=2)).timestamp()),
            ExpiringKey("fb-later", "payments", "checkout", (now + timedelta(days=30)).timestamp()),
            ExpiringKey("fb-gone", "payments", "checkout", (now - timedelta(days=1)).timestamp())]
    alerts = keys_near_expiry(keys, now, timedelta(days=7))
    assert [a.details["key_id"] for a in alerts] == ["fb-soon"]
    assert alerts[0].id == keys_near_expiry(keys, now + timedelta(hours=1), timedelta(days=7))[0].id
    assert "fb-soon" in alerts[0].summary and "2.0 days" in alerts[0].summary


def test_a_minute_far_above_the_trailing_mean_is_an_anomaly_once_warm() -> None:
    detector = CostAnomaly(factor=3, min_micro=1_000, warmup=5)
    start = datetime(2026, 11, 10, 10, 0, tzinfo=timezone.utc)
    alerts = []
    for minute in range(8):  # 8 steady minutes of 2,000 each
        for i in range(2):
            alerts.append(detector.observe(settled(f"s{minute}-{i}", start + timedelta(minutes=minute, seconds=i),
                                                   1_000)))
    for i in range(10):  # minute 8: 20,000
        alerts.append(detector.observe(settled(f"burst-{i}", start + timedelta(minutes=8, seconds=i), 2_000)))
    alerts.append(detector.observe(settled("next", start + timedelta(minutes=9), 1_000)))  # closes minute 8
    found = [a for a in alerts if a is not None]
    assert len(found) == 1 and found[0].kind == "cost.anomaly" and found[0].id == "cost_anomaly/2026-11-10T10:08"
    assert found[0].details["cost_micro"] == 20_000 and found[0].details["mean_micro"] == 2_000


def test_no_anomaly_before_warmup_or_below_the_floor() -> None:
    detector = CostAnomaly(factor=3, min_micro=1_000_000, warmup=5)
    start = datetime(2026, 11, 10, 10, 0, tzinfo=timezone.utc)
    got = [detector.observe(settled(f"a{m}", start + timedelta(minutes=m), 10 if m < 8 else 500_000))
           for m in range(10)]
    assert got == [None] * 10  # minute 8 is 50,000x the mean but under the floor
    cold = CostAnomaly(factor=3, min_micro=0, warmup=5)
    assert [cold.observe(settled(f"c{m}", start + timedelta(minutes=m), 10 ** m)) for m in range(4)] == [None] * 4


def test_a_config_rollback_is_a_critical_alert_and_other_steps_are_not() -> None:
    def step(action: str) -> ConfigRollout:
        return ConfigRollout(time=T, rollout_id=4, action=action, stage_pct=0 if action == "rollback" else 25,
                             version=12, reason="error rate 21.0% against the baseline's 0.4%")
    alert = alert_of(step("rollback"))
    assert alert is not None and (alert.kind, alert.severity, alert.id) == (
        "config.rollback", "critical", "rollout/4/rollback/0/12")
    assert "rolled back: error rate 21.0%" in alert.summary and alert.details["version"] == 12
    assert all(alert_of(step(action)) is None for action in ("start", "widen", "complete", "pause", "resume"))
