"""Traces of model requests, read from the SDK's in-memory exporter: the span tree (request -> admission,
each attempt, relay), the gen_ai.* and farebox.* attributes, traceparent sent upstream and echoed back;
and an OTLP collector that is down: spans dropped and counted, requests as fast as without tracing."""

from __future__ import annotations

import asyncio
import logging
import socket
import time

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from farebox.observe import build_tracing
from farebox.settings_observe import TracingSettings
from proxy.observe.metrics import Metrics
from proxy.observe.tracing import Tracing
from tests.proxy.observe.pod import CHAT, running_pod

pytestmark = pytest.mark.filterwarnings("ignore::aiohttp.web_exceptions.NotAppKeyWarning")
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_PARENT = f"00-{CALLER_TRACE}-00f067aa0ba902b7-01"


def tracing() -> tuple[Tracing, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Tracing(provider), exporter


async def test_a_request_span_with_admission_attempt_and_relay_children() -> None:
    t, exporter = tracing()
    async with running_pod(tracing=t) as pod:
        resp = await pod.post({**CHAT, "stream": True}, traceparent=CALLER_PARENT)
        assert resp.status == 200
        await resp.read()
        echoed = resp.headers["traceparent"]
        upstream = [h.get("traceparent") for h in pod.upstream_headers]
    spans = exporter.get_finished_spans()
    root = next(s for s in spans if s.parent is not None and s.parent.span_id == 0x00f067aa0ba902b7)
    assert root.name == "chat chat-default" and format(root.context.trace_id, "032x") == CALLER_TRACE
    children = [s for s in spans if s.parent is not None and s.parent.span_id == root.context.span_id]
    names = sorted(s.name.split(" ")[0] for s in children)
    assert names == ["farebox.admission", "farebox.attempt", "farebox.relay"]
    for child in children:
        assert root.start_time <= child.start_time <= child.end_time <= root.end_time, child.name
    a = root.attributes
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.request.model"] == "chat-default"
    assert a["gen_ai.system"] in ("sim-openai", "sim-anthropic") and a["gen_ai.response.model"].startswith("sim-")
    assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
    assert a["farebox.team"] == "platform" and a["farebox.alias"] == "chat-default"
    assert a["farebox.deployment"] in ("sim-openai-mumbai", "sim-anthropic-mumbai")
    assert a["farebox.cost_micro"] > 0 and a["farebox.price_version"] == 1 and a["farebox.currency"] == "INR"
    attempt = next(s for s in children if s.name.startswith("farebox.attempt"))
    assert attempt.attributes["farebox.outcome"] == "ok" and attempt.attributes["gen_ai.usage.output_tokens"] > 0
    # W3C trace context: same trace id upstream and back to the caller, parented on the request span
    span_id = format(root.context.span_id, "016x")
    assert echoed == f"00-{CALLER_TRACE}-{span_id}-01"
    assert upstream == [echoed]


async def test_failover_gives_one_span_per_attempt_with_the_failure_marked() -> None:
    t, exporter = tracing()
    async with running_pod(tracing=t) as pod:
        resp = await pod.post({**CHAT, "model": "chat-failover"})
        assert resp.status == 200
        assert resp.headers["traceparent"].startswith("00-")
    spans = exporter.get_finished_spans()
    attempts = sorted((s for s in spans if s.name.startswith("farebox.attempt")), key=lambda s: s.start_time)
    assert [s.attributes["farebox.deployment"] for s in attempts] == ["sim-dead", "sim-openai-mumbai"]
    assert not attempts[0].status.is_ok and attempts[1].attributes["farebox.outcome"] == "ok"
    root = next(s for s in spans if s.name == "chat chat-failover")
    assert root.attributes["farebox.attempts"] == 2
    assert {s.name for s in spans if s.parent and s.parent.span_id == root.context.span_id} >= {
        "farebox.admission", "farebox.relay"}


async def test_tracing_off_sends_no_traceparent_and_builds_no_span() -> None:
    async with running_pod() as pod:
        resp = await pod.post(CHAT)
        assert resp.status == 200 and "traceparent" not in resp.headers
        assert all("traceparent" not in h for h in pod.upstream_headers)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_an_otlp_endpoint_that_is_down_drops_spans_with_a_count_and_never_slows_requests(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="farebox.tracing")
    metrics = Metrics()
    port = _closed_port()
    settings = TracingSettings(enabled=True, otlp_endpoint=f"http://user:tok3n@127.0.0.1:{port}/v1/traces",
                               export_timeout_s=0.5)
    t = build_tracing(settings, metrics)
    assert t is not None
    try:
        async with running_pod(tracing=t) as pod:
            started = time.monotonic()
            for _ in range(5):
                resp = await pod.post(CHAT)
                assert resp.status == 200
            took = time.monotonic() - started
            assert took < 2.0, took  # the exports run in the processor's thread
        await asyncio.to_thread(t.provider.force_flush, 5000)
    finally:
        await asyncio.to_thread(t.provider.shutdown)
    assert metrics.spans_dropped._value.get() >= 5 * 3  # request, admission, attempt, relay per request
    # one warning for the outage (not one per batch), naming the setting and the collector, never its credentials
    warned = [r.getMessage() for r in caplog.records if r.name == "farebox.tracing"]
    assert len(warned) == 1 and warned[0].startswith(f"tracing.otlp_endpoint (collector at 127.0.0.1:{port})")
    assert "tok3n" not in caplog.text


async def test_an_embeddings_request_is_an_embeddings_span() -> None:
    t, exporter = tracing()
    async with running_pod(tracing=t) as pod:
        resp = await pod.client.post("/v1/embeddings", json={"model": "embed-default", "input": "hello"},
                                     headers=pod.auth)
        assert resp.status == 200, await resp.text()
    root = next(s for s in exporter.get_finished_spans() if s.name == "embeddings embed-default")
    assert root.attributes["gen_ai.operation.name"] == "embeddings"
    assert root.attributes["farebox.deployment"] == "sim-embed-mumbai" and root.attributes["farebox.cost_micro"] >= 0


def test_the_exporter_warns_once_per_outage_and_says_when_it_recovers(caplog) -> None:
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    from proxy.observe.tracing import CountingExporter

    class Scripted(SpanExporter):
        def __init__(self, results: list) -> None:
            self.results = results

        def export(self, spans):  # type: ignore[no-untyped-def]
            result = self.results.pop(0)
            if isinstance(result, Exception):
                raise result
            return result

    ok, failed = SpanExportResult.SUCCESS, SpanExportResult.FAILURE
    metrics = Metrics()
    exporter = CountingExporter(Scripted([failed, RuntimeError("boom"), ok, ok, failed]), metrics.spans_dropped,
                                "tracing.otlp_endpoint (collector at c:4318)")
    caplog.set_level(logging.INFO, logger="farebox.tracing")
    assert [exporter.export([object()] * n) for n in (2, 3, 1, 1, 4)] == [failed, failed, ok, ok, failed]
    assert metrics.spans_dropped._value.get() == 2 + 3 + 4
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "farebox.tracing"]
    where = "tracing.otlp_endpoint (collector at c:4318): "
    assert [level for level, _ in said] == ["WARNING", "INFO", "WARNING"]  # one per outage, and the recovery
    assert said[0][1].startswith(where + "span export failed") and said[1][1] == where + "span export works again"
