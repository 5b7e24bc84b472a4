"""Recording events: append to the log first, then fold what the log took into the pod's projection.

One direction only: events -> projection. ``emit`` hands the event to the
log (``EventSink.append`` accepts it at once or raises), and only an event
the log accepted is folded into the projection (embedded mode: the live
ledger that admission decides on). Append and fold happen in the caller's
event-loop turn, so a decision made on the projection and the events that
record it are one step: admission stays exact.

A refused or failed append is logged and counted, never silent; ``emit``
returns False for a refusal so that admission can refuse the request rather
than serve what the ledger cannot see. Durable acknowledgements go to
``on_durable`` (offset, event) in offset order.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable

from ledger.events import Event
from proxy.observe.metrics import Metrics
from proxy.ports import EventSink

log = logging.getLogger("farebox.proxy")

Fold = Callable[[Event], object]
Durable = Callable[[int, Event], None]


class Recorder:
    __slots__ = ("log", "metrics", "fold", "on_durable", "failures")

    def __init__(self, log: EventSink, metrics: Metrics, *, fold: Fold | None = None,
                 on_durable: Durable | None = None) -> None:
        self.log = log
        self.metrics = metrics
        self.fold = fold  # the pod's own projection of what it appended (None: the worker projects)
        self.on_durable = on_durable
        self.failures = 0

    def emit(self, event: Event) -> bool:
        """Append, then fold; True when the log accepted the event."""
        return self.appended(event) is not None

    def appended(self, event: Event) -> asyncio.Future[int] | None:
        """As ``emit``; the log's future for the event (its offset once durable), None when refused."""
        try:
            fut = self.log.append(event)
        except Exception as exc:  # a closed or failed log: count it loudly, keep serving what is in flight
            self._failed()
            log.error("event append refused (%s): %s %s", type(exc).__name__, event.type, event.id)
            return None
        if self.fold is not None:
            self.fold(event)
        fut.add_done_callback(functools.partial(self._appended, event, time.perf_counter()))
        return fut

    async def record(self, event: Event) -> int:
        """As ``emit``, then wait until the log holds the event durably (its offset); raises when it cannot."""
        try:
            fut = self.log.append(event)
        except Exception:
            self._failed()
            raise
        if self.fold is not None:
            self.fold(event)
        fut.add_done_callback(functools.partial(self._appended, event, time.perf_counter()))
        return await asyncio.shield(fut)

    def _appended(self, event: Event, started: float, fut: asyncio.Future[int]) -> None:
        if fut.cancelled():
            return
        self.metrics.event_append_seconds.observe(time.perf_counter() - started)
        exc = fut.exception()
        if exc is not None:
            self._failed()
            log.error("event append failed: %s", exc)
        elif self.on_durable is not None:
            self.on_durable(fut.result(), event)

    def _failed(self) -> None:
        self.failures += 1
        self.metrics.event_append_failures.inc()
