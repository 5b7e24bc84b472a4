"""``GET /metrics`` after real traffic through an in-process pod: every family the pod exports, with
values that agree with the traffic and the events recorded (infra/monitoring/metrics.yaml lists them)."""

from __future__ import annotations

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.infra.test_monitoring import MONITORING
from tests.proxy.observe.pod import CHAT, running_pod

pytestmark = pytest.mark.filterwarnings("ignore::aiohttp.web_exceptions.NotAppKeyWarning")

# Exported only when the pod is wired in distributed mode (spool, leases) or by the worker.
DISTRIBUTED_ONLY = {"farebox_spool_depth_bytes", "farebox_lease_grants", "farebox_lease_returns",
                    "farebox_consumer_lag_events", "farebox_archive_lag_events", "farebox_archive_lag_seconds",
                    "farebox_spans_dropped"}  # tracing on only: tests/proxy/observe/test_tracing.py


def samples(text: str) -> dict[str, list]:
    """Samples by series name; families with no series yet appear under their name with no samples."""
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        out.setdefault(family.name, [])
        for s in family.samples:
            out.setdefault(s.name, []).append(s)
    return out


def value(found: dict[str, list], name: str, **labels: str) -> float:
    return sum(s.value for s in found.get(name, []) if all(s.labels.get(k) == v for k, v in labels.items()))


async def test_every_family_after_traffic_with_sane_values() -> None:
    async with running_pod() as pod:
        for body in (CHAT, {**CHAT, "stream": True, "stream_options": {"include_usage": True}}):
            resp = await pod.post(body)
            assert resp.status == 200
            await resp.read()
        for _ in range(3):  # sim-dead refuses connections: each fails over to sim-openai-mumbai
            resp = await pod.post({**CHAT, "model": "chat-failover"})
            assert resp.status == 200, await resp.text()
        scrape = await pod.client.get("/metrics")
        assert scrape.status == 200
        found = samples(await scrape.text())
        events = list(pod.log.events)

    settled = [e for e in events if e.type == "request.settled"]
    attempted = [e for e in events if e.type == "request.attempted"]
    assert len(settled) == 5
    # requests, attempts by outcome, fallbacks
    assert value(found, "farebox_requests_total", status="200") == 5
    assert value(found, "farebox_attempts_total", outcome="ok") == 5
    assert value(found, "farebox_attempts_total", deployment="sim-dead", outcome="unavailable") >= 2
    assert value(found, "farebox_fallbacks_total", alias="chat-failover") >= 2
    assert value(found, "farebox_fallbacks_total", alias="chat-default") == 0
    # latency: TTFT for the stream, upstream per successful attempt, added per request (small, not negative)
    assert value(found, "farebox_ttft_seconds_count", alias="chat-default") == 1
    assert 0 < value(found, "farebox_ttft_seconds_sum") < 5
    assert value(found, "farebox_upstream_latency_seconds_count") == 5
    assert value(found, "farebox_added_latency_seconds_count") == 5
    assert 0 <= value(found, "farebox_added_latency_seconds_sum") < 5 * 0.5
    # tokens and cost by team and alias equal what was settled
    for kind, field in (("input", "input"), ("output", "output")):
        assert value(found, "farebox_tokens_total", team="platform", type=kind) == sum(
            getattr(e.usage, field) for e in settled) > 0
    assert value(found, "farebox_cost_micro_total", team="platform") == sum(e.cost_micro for e in settled) > 0
    assert value(found, "farebox_cost_micro_total", alias="chat-failover") > 0
    # state read at scrape time
    assert value(found, "farebox_breaker_open", deployment="sim-dead") == 1
    assert value(found, "farebox_breaker_open", deployment="sim-openai-mumbai") == 0
    assert 0 < value(found, "farebox_retry_budget_used_ratio", alias="chat-failover") <= 1
    assert value(found, "farebox_admission_queue_depth") == 0
    assert value(found, "farebox_budget_spent_micro", scope="team:platform") == sum(e.cost_micro for e in settled)
    assert value(found, "farebox_budget_limit_micro", scope="team:platform") == 50_000_000_000
    assert value(found, "farebox_budget_soft_pct", scope="team:platform") == 80
    assert value(found, "farebox_budget_spent_micro", scope="bu:retail") == sum(e.cost_micro for e in settled)
    assert value(found, "farebox_in_flight_requests") == 0
    # the event log: one acknowledgement timed per event appended
    assert value(found, "farebox_event_append_seconds_count") == len(events) >= len(attempted) + 10
    assert value(found, "farebox_admission_seconds_count") == 5
    assert value(found, "farebox_event_append_failures_total") == 0
    # every family the list says exists (and this pod's wiring exports) was scraped
    documented = yaml.safe_load((MONITORING / "metrics.yaml").read_text())["metrics"]
    for m in documented:
        if m["status"] == "exists" and m["name"] not in DISTRIBUTED_ONLY and m.get("via") != "textfile":
            assert m["name"] in found, f"{m['name']} missing from /metrics"
    assert not any(k in s.labels for fam in found.values() for s in fam for k in ("key_id", "request_id"))
