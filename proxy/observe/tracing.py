"""OpenTelemetry traces of model requests (off unless ``tracing.enabled``).

One span per request (SERVER, parented on the caller's ``traceparent``) with
children for admission, each attempt and the relay. The request span carries
the GenAI semantic-convention attributes (``gen_ai.operation.name``,
``gen_ai.system``, ``gen_ai.request.model`` = the alias, ``gen_ai.response.model``,
``gen_ai.usage.*``) and farebox's own (``farebox.team``, ``.alias``,
``.deployment``, ``.cost_micro``, ``.currency``, ``.price_version``).

The children are recorded when their step is over, from the times the meter
already took (``start_time`` / ``end_time`` passed explicitly), so tracing
adds no clock reads or awaits to a step. The provider is sent the request
span's ``traceparent`` (through ``proxy.observe.trace_context.TRACE_HEADERS``) and
the caller gets it back on the response. With tracing off none of this is
installed: the request path pays one ``meter.trace is None`` check per step.

Export is the SDK's batch processor's business, in its own thread; an export
that fails (collector down, timeout) is counted in ``farebox_spans_dropped``
and never waits a request.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Awaitable, Callable, Sequence

from aiohttp import web
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from prometheus_client import Counter

from proxy.observe.trace_context import TRACE_HEADERS

_PROPAGATOR = TraceContextTextMapPropagator()
log = logging.getLogger("farebox.tracing")
TRACE = "trace"  # the request store's key for its RequestTrace


def _ns_ago(started: float, now: float) -> int:
    """Wall-clock nanoseconds of a monotonic (or perf_counter) instant ``started``, ``now`` on the same clock."""
    return time.time_ns() - int((now - started) * 1e9)


class RequestTrace:
    """One request's span and the children recorded as the meter sees each step end."""

    __slots__ = ("tracer", "span", "ctx", "headers", "last_end_ns")

    def __init__(self, tracer: trace.Tracer, span: trace.Span) -> None:
        self.tracer, self.span = tracer, span
        self.ctx = trace.set_span_in_context(span)
        self.headers: dict[str, str] = {}
        _PROPAGATOR.inject(self.headers, self.ctx)  # {"traceparent": ...}: to the provider and back to the caller
        self.last_end_ns: int | None = None

    def _child(self, name: str, start_ns: int, end_ns: int, attributes: dict[str, Any], error: str | None) -> None:
        child = self.tracer.start_span(name, self.ctx, attributes=attributes, start_time=start_ns)
        if error is not None:
            child.set_status(Status(StatusCode.ERROR, error))
        child.end(end_time=end_ns)

    def admission(self, started_perf: float, refused: str | None) -> None:
        now = time.perf_counter()
        self._child("farebox.admission", _ns_ago(started_perf, now), time.time_ns(),
                    {"farebox.refused": refused} if refused else {}, refused)

    def attempt(self, tab: Any, dep: Any, record: Any, started: float, ended: float, ttft_s: float | None) -> None:
        """One attempt (``proxy.metering.meter.Meter.attempted``); a streamed one's relay part is its own span."""
        end_ns = time.time_ns() - int((time.monotonic() - ended) * 1e9)
        start_ns = end_ns - int((ended - started) * 1e9)
        usage = record.event.usage
        attrs = {
            "farebox.attempt": record.event.attempt, "farebox.deployment": dep.id, "farebox.outcome": record.outcome,
            "gen_ai.system": dep.provider, "gen_ai.request.model": dep.model,
            "gen_ai.usage.input_tokens": usage.prompt_tokens, "gen_ai.usage.output_tokens": usage.completion_tokens,
            "farebox.cost_micro": record.cost, "http.response.status_code": record.event.status,
        }
        self._child(f"farebox.attempt {dep.id}", start_ns, end_ns, attrs,
                    None if record.outcome == "ok" else (record.code or record.outcome))
        if ttft_s is not None:
            self._child("farebox.relay", start_ns + int(ttft_s * 1e9), end_ns,
                        {"farebox.deployment": dep.id, "farebox.stream": True},
                        None if record.outcome == "ok" else (record.code or record.outcome))
        self.last_end_ns = end_ns

    def settled(self, tab: Any, status: int, dep: Any) -> None:
        """The request's attributes; a non-streamed answer's relay is from its attempt's end to now."""
        now_ns = time.time_ns()
        if not tab.stream and self.last_end_ns is not None and dep is not None:
            self._child("farebox.relay", self.last_end_ns, now_ns, {"farebox.deployment": dep.id,
                                                                    "farebox.stream": False}, None)
        usage, span = tab.total_usage, self.span
        operation = "embeddings" if tab.alias.kind == "embeddings" else "chat"
        span.update_name(f"{operation} {tab.alias.name}")
        attrs = {
            "gen_ai.operation.name": operation, "gen_ai.request.model": tab.alias.name,
            "gen_ai.usage.input_tokens": usage.prompt_tokens, "gen_ai.usage.output_tokens": usage.completion_tokens,
            "farebox.request_id": tab.request_id, "farebox.key_id": tab.key.key_id, "farebox.team": tab.key.team,
            "farebox.alias": tab.alias.name, "farebox.attempts": tab.attempts, "farebox.cost_micro": tab.total_cost,
            "farebox.currency": tab.snapshot.currency, "farebox.final_status": status,
        }
        if tab.plan is not None:
            attrs["farebox.price_version"] = tab.plan.price_version
        if dep is not None:
            attrs.update({"gen_ai.system": dep.provider, "gen_ai.response.model": dep.model,
                          "farebox.deployment": dep.id})
        span.set_attributes(attrs)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Tracing:
    """The pod's tracer: ``install`` adds its middleware, ``echo`` (a response-prepare signal) the header."""

    def __init__(self, tracer_provider: Any, dropped: Counter | None = None) -> None:
        self.provider = tracer_provider
        self.tracer = tracer_provider.get_tracer("farebox")
        self.dropped = dropped

    def install(self, middlewares: list) -> None:
        middlewares.append(self.middleware)

    async def echo(self, request: web.Request, response: web.StreamResponse) -> None:
        rt = request.get(TRACE)
        if rt is not None and "traceparent" in rt.headers:
            response.headers["traceparent"] = rt.headers["traceparent"]

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.path.startswith("/v1/"):
            return await handler(request)
        parent = _PROPAGATOR.extract(request.headers)
        span = self.tracer.start_span("farebox.request", parent, kind=SpanKind.SERVER,
                                      attributes={"http.request.method": request.method, "url.path": request.path})
        rt = RequestTrace(self.tracer, span)
        request[TRACE] = rt
        token = TRACE_HEADERS.set(rt.headers)  # this request's task (and its attempts) send it upstream
        status = 500
        try:
            resp = await handler(request)
            status = resp.status
            return resp
        except web.HTTPException as exc:
            status = exc.status
            raise
        except Exception as exc:
            status = getattr(exc, "status", 500)
            raise
        finally:
            TRACE_HEADERS.reset(token)
            span.set_attribute("http.response.status_code", status)
            if status >= 500:
                span.set_status(Status(StatusCode.ERROR))
            span.end()


class CountingExporter(SpanExporter):
    """Wraps an exporter: spans it could not deliver are counted (``farebox_spans_dropped``), not retried.

    The first failed export after a good one (or after start) logs one warning naming ``where`` (the setting
    and the collector's host, never its full URL); the next good export logs that delivery resumed.
    """

    def __init__(self, inner: SpanExporter, dropped: Counter, where: str = "tracing.otlp_endpoint") -> None:
        self.inner, self.dropped, self.where = inner, dropped, where
        self.failing = False

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception:  # noqa: BLE001 - an exporter bug must not kill the processor thread
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self.dropped.inc(len(spans))
            if not self.failing:
                self.failing = True
                log.warning("%s: span export failed; spans are dropped and counted in farebox_spans_dropped_total "
                            "until the collector answers (requests do not wait)", self.where)
        elif self.failing:
            self.failing = False
            log.info("%s: span export works again", self.where)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)
