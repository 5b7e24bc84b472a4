"""The settlement calculator (``proxy.metering.settlement``): pure, so every number is checked by hand here."""

from __future__ import annotations

from datetime import datetime, timezone

from ledger.usage import TokenUsage
from proxy.errors import ClientGone, HedgeLost, UpstreamRateLimited, UpstreamRejected, UpstreamUnavailable
from proxy.metering.settlement import (
    Plan,
    Tab,
    add_usage,
    admitted_event,
    attempt_record,
    cost_of,
    count,
    outcome_of,
    scopes_of,
    settlement,
    x_farebox,
)
from tests.proxy.fakes import key, snapshot

NOW = datetime(2026, 11, 18, 12, 0, tzinfo=timezone.utc)
OPENAI = "sim-openai-mumbai"  # USD 2.00 in / 10.00 out per 1M tokens; 88 INR per USD


def tab(run_id: str | None = "run-7", hold: int = 5_000_000) -> Tab:
    _, record = key()
    snap = snapshot(keys=[record])
    k = next(iter(snap.keys.values()))
    t = Tab(snap, "req-1", k, snap.aliases["chat-default"], run_id, "internal", False, scopes_of(k, run_id))
    t.plan = Plan(100, 50, hold, 1)
    t.holds = dict.fromkeys(t.scopes, hold)
    return t


def test_scopes_run_innermost_first() -> None:
    t = tab()
    assert t.scopes == [f"key:{t.key.key_id}", "team:platform", "bu:retail", "run:run-7"]
    assert scopes_of(t.key, None) == t.scopes[:3]


def test_cost_is_the_price_version_at_the_fx_rate_rounded_up() -> None:
    t = tab()
    dep = t.snapshot.deployments[OPENAI]
    # 1000 in * 2.00 + 500 out * 10.00 = 7000 USD per 1M = 0.007 USD = 0.616 INR = 616_000 micro-INR
    assert cost_of(t.snapshot, 1, dep, TokenUsage(input=1000, output=500), NOW) == 616_000
    assert cost_of(t.snapshot, 1, dep, TokenUsage(), NOW) == 0


def test_attempt_record_numbers_the_attempt_and_count_adds_it() -> None:
    t = tab()
    dep = t.snapshot.deployments[OPENAI]
    first = attempt_record(t, dep, TokenUsage(input=100, source="estimated"), UpstreamUnavailable("down"),
                           status=None, ttft_s=None, latency_ms=12, now=NOW)
    assert (first.event.attempt, first.outcome, first.event.status, first.code) == (1, "unavailable", 0, "provider_unavailable")
    count(t, first)
    second = attempt_record(t, dep, TokenUsage(input=1000, output=500), None, status=None, ttft_s=0.25,
                            latency_ms=40, now=NOW)
    assert (second.event.attempt, second.outcome, second.event.status, second.event.ttft_ms) == (2, "ok", 200, 250)
    count(t, second)
    assert t.attempts == 2
    assert t.total_cost == first.cost + second.cost
    assert t.total_usage.input == 1100 and t.total_usage.source == "estimated"
    assert [p["outcome"] for p in t.path] == ["unavailable", "ok"]


def test_settlement_charges_the_cost_on_every_scope_and_records_the_overrun() -> None:
    t = tab(hold=100_000)
    dep = t.snapshot.deployments[OPENAI]
    count(t, attempt_record(t, dep, TokenUsage(input=1000, output=500), None, status=None, ttft_s=None,
                            latency_ms=1, now=NOW))
    done = settlement(t, 200, dep, latency_ms=50, now=NOW)
    assert done.charges == dict.fromkeys(t.scopes, 616_000)
    assert done.overrun == 516_000  # what the hold did not cover: recorded, never hidden
    assert done.event.cost_by_scope == done.charges and done.event.hold_released == t.holds
    assert done.event.id == "req-1/settled" and done.event.deployment == OPENAI


def test_settlement_without_an_answer_charges_nothing() -> None:
    t = tab()
    done = settlement(t, 503, None, latency_ms=5, now=NOW)
    assert done.charges == dict.fromkeys(t.scopes, 0) and done.overrun == 0 and done.event.deployment is None


def test_admitted_event_holds_the_same_amount_on_every_scope() -> None:
    t = tab()
    event = admitted_event(t, Plan(10, 20, 777, 1), {"team:platform": "lease-1"}, "pod-a", 900, NOW)
    assert event.holds == dict.fromkeys(t.scopes, 777)
    assert (event.pod, event.hold_ttl_s, event.leases, event.run_id) == ("pod-a", 900, {"team:platform": "lease-1"}, "run-7")


def test_outcome_classes() -> None:
    assert outcome_of(None) == "ok"
    assert outcome_of(ClientGone()) == outcome_of(HedgeLost()) == "client_closed"
    assert outcome_of(UpstreamRateLimited("slow down")) == "rate_limited"
    assert outcome_of(UpstreamUnavailable("t", code="first_token_timeout")) == "timeout"
    assert outcome_of(UpstreamUnavailable("cut", code="stream_interrupted")) == "interrupted"
    assert outcome_of(UpstreamRejected("bad")) == "rejected"
    assert outcome_of(ValueError()) == "error"


def test_usage_is_estimated_once_any_counted_part_was() -> None:
    provider = TokenUsage(input=10, output=5)
    assert add_usage(provider, TokenUsage(source="estimated")).source == "provider"  # counts nothing
    assert add_usage(provider, TokenUsage(input=3, source="estimated")).source == "estimated"
    assert add_usage(TokenUsage(input=1, source="estimated"), provider).source == "estimated"


def test_x_farebox_block() -> None:
    t = tab()
    dep = t.snapshot.deployments[OPENAI]
    count(t, attempt_record(t, dep, TokenUsage(input=1000, output=500), None, status=None, ttft_s=None,
                            latency_ms=1, now=NOW))
    block = x_farebox(t, dep)
    assert block["cost"] == "0.616000" and block["cost_micro"] == 616_000 and block["currency"] == "INR"
    assert block["path"] == [{"deployment": OPENAI, "outcome": "ok", "code": None}]
