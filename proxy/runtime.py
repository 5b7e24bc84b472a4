"""What a gateway pod holds while it runs, handed to the aiohttp app.

The composition root (``farebox/``) builds it; handlers read it through the
typed ``RUNTIME`` app key. The snapshot is swapped whole (one reference
change); nothing here reads the environment or the config database.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from aiohttp import web

from pricing.calibration import Estimator
from proxy.admission.budgets import BudgetGate
from proxy.admission.limits import Buckets
from proxy.metrics import Metrics
from proxy.routing.state import RoutingState
from proxy.snapshot import Secrets, Snapshot
from proxy.upstream.relay import UpstreamClient

log = logging.getLogger("farebox.proxy")


class EventSink(Protocol):
    """The part of the event log the data plane needs: append, never wait."""

    def append(self, event: Any) -> "asyncio.Future[int]": ...


class ControlStore(Protocol):
    """Where admin writes go; the new snapshot is live when the call returns."""

    async def set_budget(self, record: dict[str, Any]) -> None: ...


@dataclass(frozen=True, slots=True)
class ProxyOptions:
    pod_id: str
    max_body_bytes: int = 4 * 1024 * 1024
    hold_ttl_s: int = 900
    max_in_flight: int = 2000  # model requests in flight per pod; above: fast 503 + Retry-After (0 = no cap)
    drain_timeout_s: float = 25.0  # SIGTERM: how long streams may finish (below aiohttp's shutdown timeout)


@dataclass
class Runtime:
    snapshot: Snapshot
    secrets: Secrets
    events: EventSink
    options: ProxyOptions
    upstream: UpstreamClient | None = None  # opened in the app's cleanup context
    budgets: BudgetGate | None = None  # embedded: exact holds on the in-process ledger
    wallets: Any = None  # distributed: proxy.admission.wallet.Wallets (leases per scope)
    limits: Buckets | None = None  # token buckets: in-process, or Redis shared by pods
    estimator: Estimator = field(default_factory=Estimator)  # input tokens; calibrated per key
    metrics: Metrics = field(default_factory=Metrics)
    on_durable: Callable[[int, Any], None] | None = None  # (offset, event) once the log acknowledged it
    watches: set = field(default_factory=set)  # open ClientWatch objects, checked by one poller
    watch_task: "asyncio.Task[None] | None" = None
    control: ControlStore | None = None
    rng: random.Random = field(default_factory=random.Random)
    clock: Callable[[], float] = time.time
    append_failures: int = 0
    routing: RoutingState = field(default_factory=RoutingState)  # breakers, health, 429 pauses, retry budgets
    in_flight: int = 0  # model requests being served now
    draining: bool = False  # SIGTERM seen: refuse new requests
    drain_expired: bool = False  # drain deadline passed: end the streams still open
    _background: set = field(default_factory=set)

    def now_us(self) -> int:
        return int(self.clock() * 1_000_000)

    def adjust_limits(self, deltas: list) -> None:
        """Settle rate-limit reservations (actual − reserved) in the background; never blocks settlement."""
        if not deltas or self.limits is None:
            return
        task = asyncio.get_running_loop().create_task(self.limits.adjust(deltas, self.now_us()))
        self._background.add(task)
        task.add_done_callback(self._adjusted)

    def _adjusted(self, task: "asyncio.Task[None]") -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("rate-limit settlement failed: %s", task.exception())

    def swap(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    def emit(self, event: Any) -> None:
        """Apply to the in-process ledger (at once, so admission stays exact), then append without waiting.

        A failed append is logged and counted, never silent.
        """
        if self.budgets is not None:
            self.budgets.ledger.apply(event)
        try:
            fut = self.events.append(event)
        except Exception as exc:  # a closed or failed log: count it loudly, keep serving what is in flight
            self.append_failures += 1
            self.metrics.event_append_failures.inc()
            log.error("event append refused (%s): %s %s", type(exc).__name__, event.type, event.id)
            return
        fut.add_done_callback(functools.partial(self._appended, event))

    def _appended(self, event: Any, fut: "asyncio.Future[int]") -> None:
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            self.append_failures += 1
            self.metrics.event_append_failures.inc()
            log.error("event append failed: %s", exc)
        elif self.on_durable is not None:
            self.on_durable(fut.result(), event)


RUNTIME = web.AppKey("runtime", Runtime)
