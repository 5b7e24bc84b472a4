"""Wiring a pod's traces: the tracer provider and its exporter, from the ``tracing`` settings.

Off (the default): nothing is built and ``proxy.tracing`` is never imported.
On: a batch span processor exports over OTLP/HTTP (``tracing.otlp_endpoint``)
in its own thread with a short timeout; what it cannot deliver is counted in
``farebox_spans_dropped``. On with no endpoint: spans are built and dropped
uncounted (measures tracing's cost, e.g. in ``make bench``).
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator

from aiohttp import web

from farebox.settings_observe import TracingSettings
from proxy.metrics import Metrics


def build_tracing(settings: TracingSettings, metrics: Metrics):  # -> proxy.tracing.Tracing | None
    if not settings.enabled:
        return None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from proxy.tracing import CountingExporter, Tracing

    provider = TracerProvider(resource=Resource.create({"service.name": settings.service_name}))
    if settings.otlp_endpoint is not None:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise SystemExit("error: tracing.otlp_endpoint is set but the OTLP exporter is not installed "
                             "(pip install 'farebox[otlp]')") from None
        exporter = OTLPSpanExporter(endpoint=settings.otlp_endpoint, timeout=settings.export_timeout_s)
        provider.add_span_processor(BatchSpanProcessor(CountingExporter(exporter, metrics.spans_dropped),
                                                       export_timeout_millis=int(settings.export_timeout_s * 1000)))
    return Tracing(provider, metrics.spans_dropped)


def tracing_ctx(tracing):
    """Cleanup context: flush and stop the exporter when the app closes."""

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        yield
        if tracing is not None:
            await asyncio.to_thread(tracing.provider.shutdown)

    return ctx
