"""The admission shell: the hold is priced, funded on every budget scope the request touches,
and recorded — or the request is refused with a 429 before any byte goes upstream.

Each step is a pure function of ``proxy/admission`` (``plan.hold``,
``ratelimit.request_draws`` / ``refusal``, the budget decision behind
``BudgetPort.admit``) or ``budget_headers`` here; this shell reads the ports
and records the result.

The hold asked for is the worst case (output cap at the dearest candidate)
and, when the key and alias have a learned output figure
(``rt.outputs``), that figure priced the same way; the budget port decides
which to hold. A budget refusal is recorded as ``request.refused`` in the
turn it was decided.

Order matters: the rate-limit reservation (possibly a Redis round trip)
comes first; after the budget port's funding there is no ``await`` until
``request.admitted`` is recorded, so the decision and its record are one
step on the event loop. A budget refusal refunds the buckets it had
reserved; an admission the event log refuses is released and answered 503.
"""

from __future__ import annotations

import functools
import random
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Protocol, Sequence

from ledger.output_sketch import OutputLearner
from ledger.refusals import REFUSAL_CODES
from ledger.request_events import BATCH_TAG, PRIORITY_TAG
from pricing.money import to_decimal
from proxy.admission.budget_port import BudgetAsk, BudgetPort, Funding
from proxy.admission.plan import holds
from proxy.admission.priority import BATCH
from proxy.admission.ratelimit import deployment_draws, limit_headers, refusal, request_draws
from proxy.admission.spend_rate import spend_draws
from proxy.errors import NOT_ADMITTED_HEADER, BudgetRefused, EventLogUnavailable, GatewayError
from proxy.limits import Buckets
from proxy.limits.draws import items, refund
from proxy.limits.settler import LimitSettler
from proxy.metering.meter import Meter
from proxy.metering.settlement import Plan
from proxy.observe.metrics import Metrics
from proxy.routing.failover import Tries
from proxy.routing.state import RoutingState
from proxy.snapshot import Deployment, Snapshot


class AdmitPorts(Protocol):
    """What admission reads and reserves through: the pod's runtime (``proxy.runtime.Runtime``) has all of it."""

    @property
    def limits(self) -> Buckets: ...
    @property
    def budgets(self) -> BudgetPort: ...
    @property
    def outputs(self) -> OutputLearner: ...
    @property
    def limit_settler(self) -> LimitSettler: ...
    @property
    def metrics(self) -> Metrics: ...
    @property
    def routing(self) -> RoutingState: ...
    @property
    def rng(self) -> random.Random: ...
    @property
    def clock(self) -> Callable[[], float]: ...

    def now_us(self) -> int: ...


@dataclass(slots=True)  # built per request: plain slots, no frozen-init cost
class Admitted:
    plan: Plan
    headers: dict[str, str]


async def admit(rt: AdmitPorts, meter: Meter, cands: Sequence[Deployment], est_input: int, max_output: int,
                tier: str | None = None) -> Admitted:
    """Admit or raise; either way the answer carries ``server-timing: admit;dur=<ms>``. ``tier``: the service tier
    the request asks for (its price sizes the hold where the deployment has one)."""
    started = time.perf_counter()
    refused = None
    try:
        admitted = await _admit(rt, meter, cands, est_input, max_output, tier)
    except GatewayError as exc:
        exc.headers["server-timing"] = _timing(started)
        rt.metrics.refusals.labels(exc.code or "unknown").inc()
        refused = exc.code or "refused"
        raise
    finally:
        rt.metrics.admission_seconds.observe(time.perf_counter() - started)
        if meter.trace is not None:
            meter.trace.admission(started, refused)
    admitted.headers["server-timing"] = _timing(started)
    return admitted


def _timing(started: float) -> str:
    return f"admit;dur={(time.perf_counter() - started) * 1000:.3f}"


async def _admit(rt: AdmitPorts, meter: Meter, cands: Sequence[Deployment], est_input: int, max_output: int,
                 tier: str | None) -> Admitted:
    tab = meter.tab
    snap = tab.snapshot
    now_s = rt.clock()
    learned_out = rt.outputs.output_tokens(tab.key.key_id, tab.alias.name, max_output)
    plan, learned_plan = holds(snap, cands, est_input, max_output, datetime.fromtimestamp(now_s, timezone.utc), tier,
                               min(learned_out, max_output))
    draws = request_draws(snap, tab.key, est_input, max_output) + spend_draws(snap, tab.key, plan.hold_micro)
    headers: dict[str, str] = {}
    if draws:
        res = await rt.limits.reserve(items(draws), rt.now_us())
        if not res.ok:
            exc = refusal(draws, res, est_input, max_output)
            if meter.held is not None or BATCH_TAG in tab.tags:  # a batch line: nothing recorded, it keeps its id
                exc.headers[NOT_ADMITTED_HEADER] = "1"
            raise exc
        headers.update(limit_headers(draws, res))
    if meter.held is not None:  # a batch line held when its batch was admitted whole (``proxy.batches.reserve``)
        meter.draws = draws
        meter.admitted(plan, Funding({}, [], None, False, meter.held), recorded=True)
        return Admitted(plan, headers)
    learned = learned_plan.hold_micro
    ask = BudgetAsk(tab.request_id, tab.scopes, plan.hold_micro, est_input, max_output, now_s,
                    learned_micro=learned, key_id=tab.key.key_id, max_wait_s=meter.max_wait_s)
    try:
        funding = await rt.budgets.admit(snap, ask)
    except GatewayError as exc:
        # The refusal is recorded in the turn it was decided (no await since): log order = decision order.
        scope = exc.scope if isinstance(exc, BudgetRefused) else None
        if exc.code in REFUSAL_CODES and (scope is not None or exc.code == "request_cost_cap_exceeded"):
            meter.refused(plan, exc.code, scope)
        rt.limit_settler.adjust(refund(draws))
        raise
    # From the funding to request.admitted: no await, so the money and its record are one step.
    meter.draws = draws
    if not meter.admitted(plan, funding):
        rt.budgets.release(tab.request_id)
        rt.limit_settler.adjust(refund(draws))
        raise EventLogUnavailable("The gateway cannot record requests right now; retry shortly.",
                                  headers={"Retry-After": "1"})
    headers.update(budget_headers(snap, funding))
    return Admitted(plan, headers)


def budget_headers(snap: Snapshot, funding: Funding) -> dict[str, str]:
    """``x-fb-budget-remaining`` / ``-currency`` when the tightest scope is known; ``-state: soft`` past soft."""
    headers: dict[str, str] = {}
    if funding.remaining_micro is not None:
        headers["x-fb-budget-remaining"] = str(to_decimal(max(funding.remaining_micro, 0)))
        headers["x-fb-budget-currency"] = snap.currency
    if funding.soft:
        headers["x-fb-budget-state"] = "soft"
    return headers


async def clear_deployment(rt: AdmitPorts, meter: Meter, dep: Deployment) -> GatewayError | None:
    """Take the deployment's share of the provider's limits before calling it; the refusal if short.

    Handed to routing's attempt loop as its ``clear`` step: routing decides the order, admission the limits.
    """
    plan = meter.tab.plan
    if plan is None or dep.id in meter.dep_draws:  # a batch request's were taken before it was admitted
        return None
    draws = deployment_draws(meter.tab.snapshot, dep, plan.est_input_tokens, plan.max_output_tokens)
    if not draws:
        return None
    res = await rt.limits.reserve(items(draws), rt.now_us())
    if not res.ok:
        return refusal(draws, res, plan.est_input_tokens, plan.max_output_tokens)
    meter.dep_draws[dep.id] = draws
    return None


def tries(rt: AdmitPorts, meter: Meter) -> Tries:
    """After admission: what routing's attempt loop is handed for this request (its meter, ``clear_deployment``)."""
    assert meter.tab.plan is not None
    return Tries(meter, functools.partial(clear_deployment, rt, meter), rt.routing, rt.rng,
                 meter.tab.plan.est_input_tokens, queued=meter.tab.tags.get(PRIORITY_TAG) != BATCH)
