"""Wiring a pod's traces (``tracing`` settings) and its alert notifier (``alerts`` settings).

Off (the default): nothing is built and ``proxy.observe.tracing`` is never imported.
On: a batch span processor exports over OTLP/HTTP (``tracing.otlp_endpoint``)
in its own thread with a short timeout; what it cannot deliver is counted in
``farebox_spans_dropped``. On with no endpoint: spans are built and dropped
uncounted (measures tracing's cost, e.g. in ``make bench``).

Alerts: with ``alerts.webhook_url`` set, background tasks feed events to the
notifier and check key expiry hourly (``streams.notify``): the embedded pod
tails its event log; in distributed mode ``farebox archiver`` (one per
cluster) reads the request and scope-entry topics and the config database.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import AsyncIterator
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from farebox.settings_observe import AlertSettings, TracingSettings
from proxy.observe.metrics import Metrics
from streams.archive.manifest import Manifest
from streams.eventlog import EventLog
from streams.notify.alerts import CostAnomaly, ExpiringKey, keys_near_expiry
from streams.notify.notifier import AlertFeed, Dispatcher, follow_alerts
from streams.notify.webhook import WebhookNotifier

DISPATCHER = web.AppKey("alert_dispatcher", Dispatcher)
log = logging.getLogger("farebox.notify")


def build_tracing(settings: TracingSettings, metrics: Metrics):  # -> proxy.observe.tracing.Tracing | None
    if not settings.enabled:
        return None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from proxy.observe.tracing import CountingExporter, Tracing

    provider = TracerProvider(resource=Resource.create({"service.name": settings.service_name}))
    if settings.otlp_endpoint is not None:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise SystemExit("error: tracing.otlp_endpoint is set but the OTLP exporter is not installed "
                             "(pip install 'farebox[otlp]')") from None
        exporter = OTLPSpanExporter(endpoint=settings.otlp_endpoint, timeout=settings.export_timeout_s)
        url = urlsplit(settings.otlp_endpoint)  # host and port only: the URL's userinfo may be a credential
        where = f"tracing.otlp_endpoint (collector at {url.hostname}{f':{url.port}' if url.port else ''})"
        provider.add_span_processor(BatchSpanProcessor(CountingExporter(exporter, metrics.spans_dropped, where),
                                                       export_timeout_millis=int(settings.export_timeout_s * 1000)))
    return Tracing(provider, metrics.spans_dropped)


def tracing_ctx(tracing):
    """Cleanup context: flush and stop the exporter when the app closes."""

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        yield
        if tracing is not None:
            await asyncio.to_thread(tracing.provider.shutdown)

    return ctx


Feed = Callable[[AlertFeed], Awaitable[None]]  # runs until cancelled, handing every event to the feed


@asynccontextmanager
async def running_alerts(settings: AlertSettings, feed: Feed, keys: Callable[[], Iterable[ExpiringKey]],
                         *, key_check_s: float = 3600.0, archive_root: Path | None = None
                         ) -> AsyncIterator[Dispatcher | None]:
    """The notifier's tasks while the block runs (none without ``alerts.webhook_url``): the event feed, the
    dispatcher, and the hourly key-expiry check (``keys`` runs in a thread: it may read the config database)."""
    if settings.webhook_url is None:
        yield None
        return
    session = aiohttp.ClientSession()
    head = Manifest(archive_root).head if archive_root is not None else None  # every alert carries the head
    notifier = WebhookNotifier(settings.webhook_url, session, secret=settings.webhook_secret,
                               timeout_s=settings.timeout_s, setting="alerts.webhook_url", archive_head=head)
    dispatcher = Dispatcher(notifier, retries=settings.retries, backoff_s=settings.backoff_s)
    within = timedelta(days=settings.key_expiry_days)

    async def check_keys() -> None:
        while True:
            try:
                found = await asyncio.to_thread(lambda: list(keys()))
            except Exception:  # noqa: BLE001 - e.g. the config database is down: try again next time
                log.warning("key expiry check failed; retrying in %.0fs", key_check_s, exc_info=True)
            else:
                dispatcher.offer(keys_near_expiry(found, datetime.now(timezone.utc), within))
            await asyncio.sleep(key_check_s)

    tasks = [asyncio.create_task(feed(AlertFeed(dispatcher, CostAnomaly(settings.anomaly_factor,
                                                                          settings.anomaly_min_micro)))),
             asyncio.create_task(dispatcher.run()), asyncio.create_task(check_keys())]
    try:
        yield dispatcher
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await session.close()


def alerts_ctx(settings: AlertSettings, events: EventLog, keys: Callable[[], Iterable[ExpiringKey]],
               archive_root: Path | None = None):
    """Embedded mode's cleanup context: alerts from tailing the pod's own event log (never the request path)."""

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        async with running_alerts(settings, lambda feed: follow_alerts(events, feed), keys,
                                  archive_root=archive_root) as dispatcher:
            if dispatcher is not None:
                app[DISPATCHER] = dispatcher
            yield

    return ctx


def expiring_keys(snapshot) -> list[ExpiringKey]:
    """The snapshot's live keys that have an expiry (revoked keys are not warned about)."""
    return [ExpiringKey(k.key_id, k.team, k.app, k.expires_at) for k in snapshot.keys.values()
            if k.expires_at is not None and not k.revoked]


def config_db_keys(settings) -> Callable[[], list[ExpiringKey]]:  # settings: farebox.settings.Settings
    """Distributed mode: the live keys with an expiry, from the config database's current snapshot."""
    opened: list = []

    def keys() -> list[ExpiringKey]:
        from farebox.control import open_config_db
        from proxy.control.document import compile_document

        if not opened:
            opened.append(open_config_db(settings))
        db = opened[0]
        head = db.head()
        return expiring_keys(settings.snapshot if head is None else compile_document(db.document(head[0]), head[0]))

    return keys
