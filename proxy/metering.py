"""The metering shell: one request's events recorded, its ports settled, its metrics counted.

A ``Meter`` lives for one request. Every number and event comes from the
pure calculator (``proxy.settlement``); the meter only does what those
values ask: record the event (``Recorder.emit``: append, then fold), settle
rate-limit reservations in the background, settle the budget hold through
the ``BudgetPort``, feed the estimator's calibration, count metrics.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

from pricing.calibration import Estimate
from pricing.usage import TokenUsage
from proxy.admission.budget_port import Funding
from proxy.admission.plan import Plan
from proxy.admission.ratelimit import Draw
from proxy.admission.ratelimit import settlement as limit_settlement
from proxy.runtime import Runtime
from proxy.settlement import Tab, admitted_event, attempt_record, count, settlement, x_farebox
from proxy.snapshot import Deployment


class Meter:
    __slots__ = ("rt", "tab", "started", "draws", "dep_draws", "estimates")

    def __init__(self, rt: Runtime, tab: Tab) -> None:
        self.rt = rt
        self.tab = tab
        self.started = time.monotonic()
        self.draws: list[Draw] = []  # rate-limit reservations of the request (key, team)
        self.dep_draws: dict[str, list[Draw]] = {}  # ... and of each deployment tried
        self.estimates: dict[str, Estimate] = {}  # input-token estimate per candidate, for calibration

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.rt.clock(), timezone.utc)

    def admitted(self, plan: Plan, funding: Funding) -> bool:
        """Record ``request.admitted`` and the funding's notices; False when the log refused the admission."""
        tab, options = self.tab, self.rt.options
        event = admitted_event(tab, plan, funding.leases, options.pod_id, options.hold_ttl_s, self._now())
        tab.plan, tab.holds, tab.leases = plan, event.holds, funding.leases
        if not self.rt.recorder.emit(event):
            tab.plan = None  # nothing was admitted: there is nothing to settle
            return False
        for notice in funding.events:
            self.rt.recorder.emit(notice)
        return True

    def attempted(self, dep: Deployment, *, started: float, usage: TokenUsage | None,
                  error: BaseException | None = None, ttft_s: float | None = None, status: int | None = None) -> int:
        """Record one attempt; returns its cost in micro-units."""
        rt, tab = self.rt, self.tab
        usage = usage or TokenUsage(source="provider")
        if error is None and dep.id in self.estimates:
            rt.estimator.observe(self.estimates[dep.id], usage, key_id=tab.key.key_id, model_family=dep.provider)
        rt.limit_settler.adjust(limit_settlement(self.dep_draws.pop(dep.id, []), usage))
        record = attempt_record(tab, dep, usage, error, status=status, ttft_s=ttft_s,
                                latency_ms=int((time.monotonic() - started) * 1000), now=self._now())
        count(tab, record)
        rt.metrics.attempts.labels(dep.id, record.outcome).inc()
        rt.recorder.emit(record.event)
        return record.cost

    def x_farebox(self, dep: Deployment) -> dict:
        return x_farebox(self.tab, dep)

    def settle(self, final_status: int, dep: Deployment | None) -> None:
        """Replace the holds by the actual cost; settling twice (or a request never admitted) is a no-op."""
        tab, rt = self.tab, self.rt
        if tab.settled or tab.plan is None:
            return
        tab.settled = True
        rt.limit_settler.adjust(limit_settlement(self.draws, tab.total_usage, tab.total_cost))
        done = settlement(tab, final_status, dep, latency_ms=int((time.monotonic() - self.started) * 1000),
                          now=self._now())
        rt.budgets.settle(tab.request_id, done.charges)
        rt.metrics.requests.labels(tab.alias.name, str(final_status)).inc()
        if done.overrun:  # recorded, never hidden: in the event and here
            rt.metrics.overruns.inc()
            rt.metrics.overrun_micro.inc(done.overrun)
        rt.recorder.emit(done.event)
