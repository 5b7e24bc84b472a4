"""The metering shell: one request's events recorded, its ports settled, its metrics counted.

A ``Meter`` lives for one request. Every number and event comes from the
pure calculator (``proxy.metering.settlement``); the meter only does what those
values ask: record the event (``Recorder.emit``: append, then fold), settle
rate-limit reservations in the background, settle the budget hold through
the ``BudgetPort``, feed the estimator's calibration, count metrics, and
keep what the access log reads (``proxy.observe.access_log``) and, when tracing is
on, hand each step to the request's trace (``proxy.observe.tracing``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, Callable, Protocol, Sequence

from ledger.output_sketch import OutputLearner
from ledger.refusals import RequestRefused
from ledger.usage import TokenUsage
from pricing.calibration import Estimate, Estimator
from proxy.limits.draws import Draw
from proxy.limits.draws import settlement as limit_settlement
from proxy.limits.settler import LimitSettler
from proxy.metering.recorder import Recorder
from proxy.metering.settlement import Plan, Tab, admitted_event, attempt_record, count, scopes_of, settlement, x_farebox
from proxy.observe.metrics import Metrics
from proxy.snapshot import Alias, Deployment, KeyRecord, Snapshot

log = logging.getLogger("farebox.proxy")


class Settles(Protocol):
    """The budget port's settling side (``proxy.admission.budget_port.BudgetPort``)."""

    def settle(self, request_id: str, charges: Mapping[str, int]) -> None: ...


class MeterOptions(Protocol):
    @property
    def pod_id(self) -> str: ...
    @property
    def hold_ttl_s(self) -> int: ...
    @property
    def budget_wait_s(self) -> float: ...


class MeterPorts(Protocol):
    """What a meter records through: the pod's runtime (``proxy.runtime.Runtime``) has all of it."""

    @property
    def recorder(self) -> Recorder: ...
    @property
    def metrics(self) -> Metrics: ...
    @property
    def budgets(self) -> Settles: ...
    @property
    def limit_settler(self) -> LimitSettler: ...
    @property
    def estimator(self) -> Estimator: ...
    @property
    def outputs(self) -> OutputLearner: ...
    @property
    def options(self) -> MeterOptions: ...
    @property
    def clock(self) -> Callable[[], float]: ...


class Funded(Protocol):
    """What the budget port funded (``proxy.admission.budget_port.Funding``)."""

    @property
    def hold_micro(self) -> int | None: ...
    @property
    def leases(self) -> dict[str, str]: ...
    @property
    def events(self) -> Sequence[Any]: ...


def open_meter(ports: MeterPorts, snap: Snapshot, request_id: str, key: KeyRecord, alias: Alias, *,
               run_id: str | None, data_class: str, stream: bool, tags: Mapping[str, str], max_wait_s: float,
               trace: Any = None, retry_of: str | None = None, privacy: Any = None,
               estimates: dict[str, Estimate] | None = None, api: str = "chat") -> "Meter":
    """One request's tab (who, which alias, which scopes, cost centre and tags, which client surface) and the
    meter that records it."""
    tab = Tab(snap, request_id, key, alias, run_id, data_class, stream, scopes_of(key, run_id),
              cost_centre=snap.cost_centre_of(key.team, key.app), tags=tags, retry_of=retry_of, privacy=privacy,
              api=api)
    return Meter(ports, tab, estimates=estimates, max_wait_s=max_wait_s, trace=trace)


# How long the last byte of an answer waits for its settlement to be durable. The log's group commit takes
# milliseconds; past this the log is in trouble (it counts and logs failed appends) and the answer goes out:
# an unsettled hold is charged in full at its TTL, never lost.
DURABLE_WAIT_S = 5.0


class Meter:
    __slots__ = ("rt", "tab", "started", "draws", "dep_draws", "estimates", "max_wait_s", "upstream_s", "ttft_s",
                 "trace", "final", "settled_fut", "held")

    def __init__(self, rt: MeterPorts, tab: Tab, *, estimates: dict[str, Estimate] | None = None,
                 max_wait_s: float | None = None, trace: Any = None) -> None:
        self.rt = rt
        self.tab = tab
        self.started = time.monotonic()
        self.draws: list[Draw] = []  # rate-limit reservations of the request (key, team)
        self.dep_draws: dict[str, list[Draw]] = {}  # ... and of each deployment tried
        self.estimates = estimates or {}  # input-token estimate per candidate, for calibration
        # how long admission may wait for in-flight holds
        self.max_wait_s = rt.options.budget_wait_s if max_wait_s is None else max_wait_s
        self.upstream_s = 0.0  # time the attempts spent upstream: the rest of the latency is the gateway's
        self.ttft_s: float | None = None  # the last streamed attempt's first token
        self.trace = trace  # the request's ``proxy.observe.tracing.RequestTrace`` when tracing is on
        self.final: tuple[int, Deployment | None] | None = None  # (status, deployment) once settled
        self.settled_fut: asyncio.Future[int] | None = None  # the settlement's append, durable when done
        self.held: int | None = None  # a batch line held when its batch was admitted whole (``proxy.batches.reserve``)

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.rt.clock(), timezone.utc)

    def admitted(self, plan: Plan, funding: Funded, recorded: bool = False) -> bool:
        """Record ``request.admitted`` and the funding's notices; False when the log refused the admission.
        ``recorded``: it was recorded already (a batch line's, with its batch): the tab takes it as its own."""
        tab, options = self.tab, self.rt.options
        if funding.hold_micro is not None and funding.hold_micro != plan.hold_micro:
            plan = Plan(plan.est_input_tokens, plan.max_output_tokens, funding.hold_micro, plan.price_version)  # right-sized
        event = admitted_event(tab, plan, funding.leases, options.pod_id, options.hold_ttl_s, self._now())
        tab.plan, tab.holds, tab.leases = plan, event.holds, funding.leases
        if recorded:
            return True
        if not self.rt.recorder.emit(event):
            tab.plan = None  # nothing was admitted: there is nothing to settle
            return False
        for notice in funding.events:
            self.rt.recorder.emit(notice)
        return True

    def refused(self, plan: Plan, code: str, scope: str | None) -> None:
        """Record ``request.refused``: admission refused the request on money (call it in the decision's turn)."""
        tab = self.tab
        key = tab.key
        self.rt.recorder.emit(RequestRefused(
            time=self._now(), request_id=tab.request_id, team=key.team, key_id=key.key_id,
            business_unit=key.business_unit or "", app=key.app, run_id=tab.run_id, alias=tab.alias.name,
            est_input_tokens=plan.est_input_tokens, max_output_tokens=plan.max_output_tokens,
            holds=dict.fromkeys(tab.scopes, plan.hold_micro), currency=tab.snapshot.currency,
            price_version=plan.price_version, pod=self.rt.options.pod_id, error_code=code, scope=scope))

    def attempted(self, dep: Deployment, *, started: float, usage: TokenUsage | None,
                  error: BaseException | None = None, ttft_s: float | None = None, status: int | None = None) -> int:
        """Record one attempt; returns its cost in micro-units."""
        rt, tab = self.rt, self.tab
        usage = usage or TokenUsage(source="provider")
        if error is None and dep.id in self.estimates:
            rt.estimator.observe(self.estimates[dep.id], usage, key_id=tab.key.key_id, model_family=dep.provider)
        rt.limit_settler.adjust(limit_settlement(self.dep_draws.pop(dep.id, []), usage))
        ended = time.monotonic()
        record = attempt_record(tab, dep, usage, error, status=status, ttft_s=ttft_s,
                                latency_ms=int((ended - started) * 1000), now=self._now())
        count(tab, record)
        metrics = rt.metrics
        metrics.attempts.labels(dep.id, record.outcome).inc()
        if usage.source == "provider_invalid":  # the provider's usage failed the boundary: billed our estimate
            metrics.usage_invalid.labels(dep.id).inc()
            log.warning("deployment %s reported usage that fails the boundary (request %s, billed an estimate): %s",
                        dep.id, tab.request_id, usage.received)
        self.upstream_s += ended - started
        if ttft_s is not None or error is None:
            timing = metrics.timing(tab.alias.name, dep.id)
            if ttft_s is not None:
                self.ttft_s = ttft_s
                timing.ttft.observe(ttft_s)
            if error is None:
                timing.upstream.observe(ended - started)
        if self.trace is not None:
            self.trace.attempt(tab, dep, record, started, ended, ttft_s)
        rt.recorder.emit(record.event)
        return record.cost

    def waited(self, seconds: float, served: bool) -> None:
        """The request waited for provider capacity (``proxy.routing.failover``): the wait, by outcome."""
        self.rt.metrics.capacity_wait_seconds.labels("served" if served else "refused").observe(seconds)

    def in_room(self, alias: str, delta: int) -> None:
        """The request joined or left the alias's capacity wait room: the waiting gauge."""
        self.rt.metrics.capacity_waiting.labels(alias).inc(delta)

    def x_farebox(self, dep: Deployment) -> dict:
        return x_farebox(self.tab, dep)

    def settle(self, final_status: int, dep: Deployment | None) -> None:
        """Replace the holds by the actual cost; settling twice (or a request never admitted) is a no-op."""
        tab, rt = self.tab, self.rt
        if tab.settled or tab.plan is None:
            return
        tab.settled = True
        rt.limit_settler.adjust(limit_settlement(self.draws, tab.total_usage, tab.total_cost))
        latency_s = time.monotonic() - self.started
        done = settlement(tab, final_status, dep, latency_ms=int(latency_s * 1000), now=self._now())
        rt.budgets.settle(tab.request_id, done.charges)
        if final_status == 200 and tab.plan.max_output_tokens and not tab.cache_hit:  # what the key uses of its cap
            rt.outputs.observe(tab.key.key_id, tab.alias.name, tab.total_usage.completion_tokens,
                               tab.plan.max_output_tokens)
        self._count(final_status, dep, latency_s)
        if done.overrun:  # recorded, never hidden: in the event and here
            rt.metrics.overruns.inc()
            rt.metrics.overrun_micro.inc(done.overrun)
        self.settled_fut = rt.recorder.appended(done.event)
        self.final = (final_status, dep)  # for the access line (``proxy.observe.access_log``)
        if self.trace is not None:
            self.trace.settled(tab, final_status, dep)

    async def durable(self) -> None:
        """Return once the settlement is durable in the log (at most ``DURABLE_WAIT_S``): an answer's last
        byte goes out only after this, so a client never holds a complete answer the log has not settled.
        A failed append was already logged and counted by the recorder; the answer is not held back for it."""
        fut = self.settled_fut
        if fut is None or fut.done():
            return
        try:
            async with asyncio.timeout(DURABLE_WAIT_S):
                await asyncio.shield(fut)
        except TimeoutError:
            log.warning("settlement of request %s not durable after %.0f s; answering anyway (the hold stays until "
                        "it is)", self.tab.request_id, DURABLE_WAIT_S)
        except Exception:  # noqa: BLE001 - the recorder's callback logged and counted it
            pass

    def _count(self, final_status: int, dep: Deployment | None, latency_s: float) -> None:
        """The settled request's families: status, tokens and cost by team and alias, fallbacks, added latency."""
        tab, metrics = self.tab, self.rt.metrics
        alias, team = tab.alias.name, tab.key.team
        metrics.requests.labels(alias, str(final_status)).inc()
        usage, spend = tab.total_usage, metrics.spend(team, alias)
        for child, n in zip(spend.tokens, (usage.input, usage.cached_input, usage.cache_write, usage.output,
                                           usage.reasoning)):  # the order of metrics.TOKEN_TYPES
            if n:
                child.inc(n)
        if tab.total_cost:
            spend.cost.inc(tab.total_cost)
        if dep is not None:
            if tab.attempts > 1 and final_status == 200:
                metrics.fallbacks.labels(alias).inc()
            metrics.timing(alias, dep.id).added.observe(max(latency_s - self.upstream_s, 0.0))
