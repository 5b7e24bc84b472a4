"""Config canaries' pure logic: the slice is sticky and grows only by adding callers, a candidate is judged on its
stage's figures against the baseline's (rolled back on a crossed threshold, widened once its window passed,
completed before everyone), and the baseline's document keeps the head's keys."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from proxy.control.errors import ConfigRejected
from proxy.control.rollout import ArmStats, Rollout, Thresholds, advanced, baseline_document, decide
from proxy.control.rollout_store import read_start

T0 = datetime(2026, 12, 6, 12, tzinfo=timezone.utc)


def rollout(**kw) -> Rollout:
    base = {"id": 7, "baseline": 3, "stages": (10, 50, 100), "stage": 0, "window_s": 60.0,
            "thresholds": Thresholds(min_requests=20), "state": "running", "stage_since": T0}
    return Rollout(**{**base, **kw})


def arm(requests: int, errors: int = 0, limited: int = 0, latency_ms: float = 40, cost: int = 1000) -> ArmStats:
    stats = ArmStats()
    for i in range(requests):
        status = 500 if i < errors else 429 if i < errors + limited else 200
        stats.record(status, latency_ms, cost)
    return stats


def test_the_slice_is_sticky_and_widening_only_adds_callers() -> None:
    callers = [f"user-{i}" for i in range(2_000)]
    at10 = {c for c in callers if rollout().in_slice("pod-a", c)}
    at50 = {c for c in callers if rollout(stage=1).in_slice("pod-a", c)}
    assert 150 < len(at10) < 250 and 900 < len(at50) < 1100 and at10 <= at50
    assert all(rollout().in_slice("pod-b", c) for c in at10)  # the same on every pod
    assert not any(rollout(state="armed").in_slice("pod-a", c) for c in callers)
    assert not any(rollout(state="rolled_back").in_slice("pod-a", c) for c in callers)
    named = rollout(pods=("pod-a",))
    assert named.in_slice("pod-a", "x") and not named.in_slice("pod-b", "x")


def test_a_crossed_threshold_rolls_back_at_once() -> None:
    r = rollout()
    bad = decide(r, arm(25, errors=5), arm(200), T0 + timedelta(seconds=5))
    assert bad.action == "rollback" and "error rate 20.0%" in bad.reason
    limited = decide(r, arm(25, limited=3), arm(200), T0)
    assert limited.action == "rollback" and "429 rate" in limited.reason
    slow = decide(r, arm(30, latency_ms=900), arm(200, latency_ms=90), T0)
    assert slow.action == "rollback" and "p95 latency 1000 ms" in slow.reason
    assert decide(r, arm(30, latency_ms=9), arm(200, latency_ms=4), T0).action == "wait"  # 10 ms vs 5: noise
    dear = decide(r, arm(30, cost=2000), arm(200, cost=1000), T0)
    assert dear.action == "rollback" and "cost per request" in dear.reason
    assert decide(r, arm(19, errors=19), arm(200), T0).action == "wait"  # not enough to judge
    assert advanced(r, bad, T0).state == "rolled_back"


def test_healthy_stages_widen_after_their_window_and_complete_before_everyone() -> None:
    r = rollout()
    assert decide(r, arm(30), arm(200), T0 + timedelta(seconds=59)).action == "wait"
    widen = decide(r, arm(30), arm(200), T0 + timedelta(seconds=60))
    assert widen.action == "widen" and "widening to 50%" in widen.reason
    later = T0 + timedelta(seconds=61)
    r2 = advanced(r, widen, later)
    assert (r2.stage, r2.pct, r2.stage_since) == (1, 50, later)
    done = decide(r2, arm(30), arm(30), later + timedelta(seconds=60))
    assert done.action == "complete" and advanced(r2, done, later).state == "completed"


def test_figures_add_up_over_processes_and_survive_the_database() -> None:
    a, b = arm(10, errors=1, latency_ms=30), arm(5, limited=2, latency_ms=3000)
    total = ArmStats.from_dict(a.to_dict())
    total.add(b)
    assert (total.requests, total.errors, total.rate_limited, total.cost_micro) == (15, 1, 2, 15_000)
    assert total.p95_ms == 3000 and total.summary()["error_pct"] == "6.7"


def test_the_baseline_document_keeps_the_head_keys_and_the_baseline_routing() -> None:
    head = {"control": {"teams": ["t2"], "aliases": ["new"], "deployments": ["d2"], "rate_limits": {"x": 2}},
            "keys": ["k1", "k2"], "prices": ["p2"]}
    base = {"control": {"teams": ["t1"], "aliases": ["old"], "deployments": ["d1"]}, "keys": ["k1"]}
    doc = baseline_document(head, base)
    assert doc["control"] == {"teams": ["t2"], "aliases": ["old"], "deployments": ["d1"]}
    assert doc["keys"] == ["k1", "k2"] and doc["prices"] == ["p2"]


@pytest.mark.parametrize("body, says", [
    ({"stages": [50, 10, 100]}, "stages"), ({"stages": [10, 50]}, "stages"), ({"stages": [0, 100]}, "stages"),
    ({"window_s": 0}, "window_s"), ({"thresholds": {"max_cost_ratio": "x"}}, "max_cost_ratio"),
    ({"colour": "red"}, "colour"),
])
def test_a_bad_start_is_refused_by_name(body: dict, says: str) -> None:
    with pytest.raises(ConfigRejected) as err:
        read_start(body)
    assert says in str(err.value.problems)


def test_a_start_reads_its_defaults() -> None:
    stages, window, t, pods = read_start({"pods": ["pod-a"], "thresholds": {"max_error_pct_points": "2"}})
    assert (stages, window, pods) == ((5, 25, 100), 300.0, ("pod-a",))
    assert t.max_error_pct_points == Decimal(2) and t.min_requests == 20
