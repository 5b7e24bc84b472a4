"""The notifier port and the background dispatcher that feeds it from the event log.

``Notifier`` is the port: ``send`` delivers one alert or raises
``NotifyFailed`` (the webhook adapter is ``streams.notify.webhook``). The
``Dispatcher`` owns delivery policy, the same for every adapter: each alert
id is sent at most once per process (a bounded memory of ids), a failed send
is retried with doubling backoff, and after the last try the alert's id,
kind and last error are logged at error and it is counted as failed.

``AlertFeed`` turns events into alerts (``streams.notify.alerts``) and
queues them; ``follow_alerts`` (embedded) feeds it by tailing the event log
from where it stood at start (old events do not fire again), and
``streams.notify.kafka_feed`` (distributed) by reading the topics. Requests never wait on it: the
request path only appends events, as it always does.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Protocol

from ledger.events import Event
from streams.eventlog import EventLog
from streams.notify.alerts import Alert, CostAnomaly, alert_of
from streams.tail import follow

log = logging.getLogger("farebox.notify")


class NotifyFailed(Exception):
    """One delivery failed (status, timeout, connection); the message names the target, never a secret."""


class Notifier(Protocol):
    async def send(self, alert: Alert) -> None:
        """Deliver ``alert`` once, or raise NotifyFailed."""


class Dispatcher:
    """Queue, dedupe by alert id, retry with backoff; ``run`` is the only consumer."""

    def __init__(self, notifier: Notifier, *, retries: int = 4, backoff_s: float = 0.5, remember: int = 10_000,
                 sleep: Callable[[float], object] = asyncio.sleep) -> None:
        self.notifier = notifier
        self.retries, self.backoff_s, self.remember = retries, backoff_s, remember
        self.sleep = sleep
        self.queue: asyncio.Queue[Alert] = asyncio.Queue()
        self.seen: OrderedDict[str, None] = OrderedDict()
        self.stats = {"sent": 0, "failed": 0, "duplicates": 0, "retries": 0}

    def offer(self, alerts: Iterable[Alert]) -> None:
        """Queue each alert whose id was not offered before (never blocks)."""
        for alert in alerts:
            if alert.id in self.seen:
                self.stats["duplicates"] += 1
                continue
            self.seen[alert.id] = None
            if len(self.seen) > self.remember:
                self.seen.popitem(last=False)
            self.queue.put_nowait(alert)

    async def run(self) -> None:
        while True:
            alert = await self.queue.get()
            try:
                await self.deliver(alert)
            finally:
                self.queue.task_done()

    async def deliver(self, alert: Alert) -> bool:
        delay = self.backoff_s
        for attempt in range(self.retries + 1):
            try:
                await self.notifier.send(alert)
            except NotifyFailed as exc:
                if attempt == self.retries:
                    self.stats["failed"] += 1
                    log.error("alert %s (%s) not delivered after %d tries: %s", alert.id, alert.kind, attempt + 1, exc)
                    return False
                self.stats["retries"] += 1
                log.warning("alert %s: delivery failed (%s); retrying in %.2fs", alert.id, exc, delay)
                await self.sleep(delay)
                delay *= 2
            else:
                self.stats["sent"] += 1
                return True
        return False


class AlertFeed:
    """Turns events into alerts for the dispatcher (the cost-anomaly detector keeps its minutes here)."""

    def __init__(self, dispatcher: Dispatcher, anomaly: CostAnomaly) -> None:
        self.dispatcher, self.anomaly = dispatcher, anomaly

    def __call__(self, event: Event) -> None:
        found = [a for a in (alert_of(event), self.anomaly.observe(event)) if a is not None]
        if found:
            self.dispatcher.offer(found)


async def follow_alerts(events: EventLog, feed: AlertFeed, *, after: int | None = None, poll_s: float = 0.5) -> None:
    """Embedded mode: tail ``events`` from ``after`` (default: the log's end now) into ``feed``."""
    start = events.last_offset if after is None else after
    async for _, event in follow(events, after=start, poll_s=poll_s):
        feed(event)
