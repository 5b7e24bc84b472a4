"""Admission, all-or-nothing: the hold is priced, checked against every budget
scope the request touches, and recorded — or the request is refused with a
429 before any byte goes upstream.

Order matters: anything that awaits (rate-limit buckets, possibly shared
through Redis) happens before the budget decision, because the decision and
the recording of ``request.admitted`` must happen in one event-loop turn. A
budget refusal refunds the buckets it had reserved.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Sequence
from zoneinfo import ZoneInfo

from ledger.periods import period_of
from pricing.money import to_decimal
from proxy.admission.plan import Plan, hold
from proxy.admission.ratelimit import (
    Draw,
    deployment_draws,
    items,
    limit_headers,
    refund,
    refusal,
    request_draws,
)
from proxy.errors import GatewayError
from proxy.metering import Meter
from proxy.runtime import Runtime
from proxy.snapshot import Deployment, Snapshot


@dataclass
class Admitted:
    plan: Plan
    headers: dict[str, str] = field(default_factory=dict)


async def admit(
    rt: Runtime, snap: Snapshot, meter: Meter, cands: Sequence[Deployment], est_input: int, max_output: int
) -> Admitted:
    """Admit or raise; either way the answer carries ``server-timing: admit;dur=<ms>``."""
    started = time.perf_counter()
    try:
        admitted = await _admit(rt, snap, meter, cands, est_input, max_output)
    except GatewayError as exc:
        exc.headers["server-timing"] = _timing(started)
        rt.metrics.refusals.labels(exc.code or "unknown").inc()
        raise
    finally:
        rt.metrics.admission_seconds.observe(time.perf_counter() - started)
    admitted.headers["server-timing"] = _timing(started)
    return admitted


def _timing(started: float) -> str:
    return f"admit;dur={(time.perf_counter() - started) * 1000:.3f}"


async def _admit(
    rt: Runtime, snap: Snapshot, meter: Meter, cands: Sequence[Deployment], est_input: int, max_output: int
) -> Admitted:
    now = datetime.fromtimestamp(rt.clock(), timezone.utc)
    plan = hold(snap, cands, est_input, max_output, now)
    headers: dict[str, str] = {}
    notices: list = []
    draws: list[Draw] = []
    if rt.limits is not None:
        draws = request_draws(snap, meter.key, est_input, max_output)
        res = await rt.limits.reserve(items(draws), rt.now_us())
        if not res.ok:
            raise refusal(draws, res, est_input, max_output)
        headers.update(limit_headers(draws, res))
    if rt.budgets is not None:
        # From here to meter.admitted: no await, so the check and the hold are one step.
        try:
            verdict = rt.budgets.admit(
                snap, request_id=meter.request_id, scopes=meter.scopes, amount_micro=plan.hold_micro,
                now=datetime.fromtimestamp(rt.clock(), timezone.utc), est_input=est_input, max_output=max_output,
            )
        except GatewayError:
            rt.adjust_limits(refund(draws))
            raise
        notices = verdict.notices
        left = verdict.remaining_micro()
        if left is not None:
            headers["x-fb-budget-remaining"] = str(to_decimal(max(left, 0)))
            headers["x-fb-budget-currency"] = snap.currency
        if notices or _past_soft(rt, snap, meter, verdict.period):
            headers["x-fb-budget-state"] = "soft"
    if rt.wallets is not None:
        try:
            meter.leases = await _fund(rt, snap, meter, plan.hold_micro, est_input, max_output, headers)
        except GatewayError:
            rt.adjust_limits(refund(draws))
            raise
    # No await from the wallet's funding to here: the money and request.admitted are one step.
    meter.draws = draws
    meter.admitted(plan)
    for notice in notices:
        rt.emit(notice)
    return Admitted(plan, headers)


async def _fund(rt: Runtime, snap: Snapshot, meter: Meter, hold: int, est_input: int, max_output: int,
                headers: dict[str, str]) -> dict[str, str]:
    """Distributed mode: the hold funded from this pod's leases on every limited scope.

    The soft-threshold header comes from the worker's projection (``ScopeStates``).
    """
    from proxy.admission.budgets import BudgetGate, limits_for

    BudgetGate.check_cap(snap, hold, est_input, max_output)
    limited = [s for s, lim in limits_for(snap, meter.scopes).items() if lim.limit_micro is not None]
    period = budget_period(snap, rt.clock())
    leases = await rt.wallets.admit(meter.request_id, limited, hold, rt.options.hold_ttl_s, period)
    if rt.wallets.states.any_past_soft(snap, limited, period, asyncio.get_running_loop().time()):
        headers["x-fb-budget-state"] = "soft"
    return leases


def budget_period(snap: Snapshot, now_s: float) -> str:
    """The budget month at ``now_s`` (epoch seconds) in the snapshot's budget timezone."""
    return period_of(datetime.fromtimestamp(now_s, timezone.utc), ZoneInfo(snap.budgets.timezone))


async def reserve_deployment(rt: Runtime, meter: Meter, dep: Deployment) -> GatewayError | None:
    """Take the deployment's share of the provider's limits before calling it; the refusal if short."""
    if rt.limits is None or meter.plan is None:
        return None
    draws = deployment_draws(meter.snapshot, dep, meter.plan.est_input_tokens, meter.plan.max_output_tokens)
    if not draws:
        return None
    res = await rt.limits.reserve(items(draws), rt.now_us())
    if not res.ok:
        return refusal(draws, res, meter.plan.est_input_tokens, meter.plan.max_output_tokens)
    meter.dep_draws[dep.id] = draws
    return None


def _past_soft(rt: Runtime, snap: Snapshot, meter: Meter, period: str) -> bool:
    assert rt.budgets is not None
    ledger = rt.budgets.ledger
    return any(ledger.threshold_crossed(s, period) for s in meter.scopes if snap.budgets.limit_for(s))
