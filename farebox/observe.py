"""Wiring a pod's traces (``tracing`` settings) and its alert notifier (``alerts`` settings).

Off (the default): nothing is built and ``proxy.tracing`` is never imported.
On: a batch span processor exports over OTLP/HTTP (``tracing.otlp_endpoint``)
in its own thread with a short timeout; what it cannot deliver is counted in
``farebox_spans_dropped``. On with no endpoint: spans are built and dropped
uncounted (measures tracing's cost, e.g. in ``make bench``).

Alerts (embedded mode): with ``alerts.webhook_url`` set, background tasks
tail the event log and check key expiry; see ``streams.notify``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta, timezone
from typing import AsyncIterator

import aiohttp
from aiohttp import web

from farebox.settings_observe import AlertSettings, TracingSettings
from proxy.metrics import Metrics
from streams.eventlog import EventLog
from streams.notify.alerts import CostAnomaly, ExpiringKey, keys_near_expiry
from streams.notify.notifier import Dispatcher, follow_alerts
from streams.notify.webhook import WebhookNotifier

DISPATCHER = web.AppKey("alert_dispatcher", Dispatcher)


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


def alerts_ctx(settings: AlertSettings, events: EventLog, keys: Callable[[], Iterable[ExpiringKey]],
               *, key_check_s: float = 3600.0):
    """Cleanup context of the notifier (``alerts.webhook_url`` set): tail the log, check key expiry hourly.

    Nothing here is on the request path: the tasks read the event log the requests append to.
    """

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        if settings.webhook_url is None:
            yield
            return
        session = aiohttp.ClientSession()
        notifier = WebhookNotifier(settings.webhook_url, session, secret=settings.webhook_secret,
                                   timeout_s=settings.timeout_s)
        dispatcher = Dispatcher(notifier, retries=settings.retries, backoff_s=settings.backoff_s)
        anomaly = CostAnomaly(settings.anomaly_factor, settings.anomaly_min_micro)
        within = timedelta(days=settings.key_expiry_days)

        async def check_keys() -> None:
            while True:
                dispatcher.offer(keys_near_expiry(keys(), datetime.now(timezone.utc), within))
                await asyncio.sleep(key_check_s)

        tasks = [asyncio.create_task(follow_alerts(events, dispatcher, anomaly)),
                 asyncio.create_task(dispatcher.run()), asyncio.create_task(check_keys())]
        app[DISPATCHER] = dispatcher
        yield
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await session.close()

    return ctx


def expiring_keys(snapshot) -> list[ExpiringKey]:
    """The snapshot's live keys that have an expiry (revoked keys are not warned about)."""
    return [ExpiringKey(k.key_id, k.team, k.app, k.expires_at) for k in snapshot.keys.values()
            if k.expires_at is not None and not k.revoked]
