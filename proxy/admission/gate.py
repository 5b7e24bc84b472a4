"""Admission, all-or-nothing: the hold is priced, checked against every budget
scope the request touches, and recorded — or the request is refused with a
429 before any byte goes upstream.

Order matters: anything that awaits (shared rate-limit buckets) happens
before the budget decision, because the decision and the recording of
``request.admitted`` must happen in one event-loop turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Sequence

from pricing.money import to_decimal
from proxy.admission.plan import Plan, hold
from proxy.control.snapshot import Deployment, Snapshot
from proxy.metering import Meter
from proxy.runtime import Runtime


@dataclass
class Admitted:
    plan: Plan
    headers: dict[str, str] = field(default_factory=dict)


def admit(
    rt: Runtime, snap: Snapshot, meter: Meter, cands: Sequence[Deployment], est_input: int, max_output: int
) -> Admitted:
    now = datetime.fromtimestamp(rt.clock(), timezone.utc)
    plan = hold(snap, cands, est_input, max_output, now)
    headers: dict[str, str] = {}
    notices: list = []
    if rt.budgets is not None:
        verdict = rt.budgets.admit(
            snap, request_id=meter.request_id, scopes=meter.scopes, amount_micro=plan.hold_micro, now=now,
            est_input=est_input, max_output=max_output,
        )
        notices = verdict.notices
        left = verdict.remaining_micro()
        if left is not None:
            headers["x-fb-budget-remaining"] = str(to_decimal(max(left, 0)))
            headers["x-fb-budget-currency"] = snap.currency
        if notices or _past_soft(rt, snap, meter, verdict.period):
            headers["x-fb-budget-state"] = "soft"
    meter.admitted(plan)
    for notice in notices:
        rt.emit(notice)
    return Admitted(plan, headers)


def _past_soft(rt: Runtime, snap: Snapshot, meter: Meter, period: str) -> bool:
    assert rt.budgets is not None
    ledger = rt.budgets.ledger
    return any(ledger.threshold_crossed(s, period) for s in meter.scopes if snap.budgets.limit_for(s))
