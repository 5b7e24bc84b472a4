"""The lease policy: how much of a scope's budget a grant slices off, and when an unreturned lease expires.

``decide_grant`` answers a ``LeaseRequested`` from the scope's ``ScopeLedger``;
``decide_lease_expiries`` closes leases their pods never returned. Pure: the
time is the request's or ``now``, passed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from ledger.lease_events import LeaseExpired, LeaseGranted, LeaseRequested
from ledger.periods import period_of
from ledger.scope_ledger import ScopeLedger


@dataclass(frozen=True, slots=True)
class LeasePolicy:
    """How big a slice is and how long it lives.

    A slice is ``remaining // (pods × share)``: it shrinks with what is left, so
    pods × slice (how early a scope can be refused) shrinks too. In the last
    ``last_pct`` percent of the limit a lease is exactly what the pod's waiting
    requests hold (their batched demand), never more. ``max_slice_micro`` caps
    a slice (None: no cap).
    """

    share: int = 4
    last_pct: int = 2
    max_slice_micro: int | None = None
    ttl_s: int = 60
    expiry_grace_s: int = 120  # an unreturned lease expires this long after its expiry: above any spool outage


def slice_size(limit: int, remaining: int, need: int, pods: int, policy: LeasePolicy, least: int | None = None) -> int:
    """The amount to grant for a demand of ``need`` whose smallest request holds ``least`` (default: ``need``).

    0 when not even ``least`` fits. Above the last ``last_pct`` a grant is one
    slice of what is left (at least ``least``), whatever the demand: a pod with
    a big queue comes back for more rather than taking the budget the other
    pods' requests are waiting for. Near the limit it is the demand, capped at
    what is left, so the waiting requests that fit are funded and the rest are
    refused.
    """
    least = need if least is None or least <= 0 else min(least, need)
    if least <= 0 or remaining < least:
        return 0
    if remaining * 100 <= limit * policy.last_pct:
        return min(need, remaining)
    amount = remaining // (max(pods, 1) * max(policy.share, 1))
    if policy.max_slice_micro is not None:
        amount = min(amount, policy.max_slice_micro)
    return min(max(amount, least), remaining)


def decide_grant(state: ScopeLedger, request: LeaseRequested, limit_micro: int | None, tz: ZoneInfo,
                 policy: LeasePolicy) -> LeaseGranted | None:
    """The processor's answer to a lease request (None: already answered). Time is the request's.

    An unlimited scope gets exactly what was asked. A refusal is a grant of 0,
    so the pod learns at once that the scope is exhausted.
    """
    if request.lease_id in state.leases or request.lease_id in state.closed_leases:
        return None
    period = period_of(request.time, tz)
    need = request.amount_micro
    if limit_micro is None:
        amount = need
    else:
        pods = len({le.pod for le in state.open_leases(period)} | {request.pod})
        amount = slice_size(limit_micro, limit_micro - state.spent(period), need, pods, policy, request.least)
    return LeaseGranted(time=request.time, lease_id=request.lease_id, scope=request.scope, pod=request.pod,
                        amount_micro=amount, expires_at=request.time + timedelta(seconds=policy.ttl_s))


def decide_lease_expiries(state: ScopeLedger, now: datetime, policy: LeasePolicy) -> list[LeaseExpired]:
    """Leases ``expiry_grace_s`` past their expiry that still reserve: closed, releasing what they reserve. That is
    an open lease, and a returned one still waiting for admissions its pod said it funded: past the grace they
    will not come (the pod died before they reached the log), and waiting longer would hold the money for ever."""
    grace = timedelta(seconds=policy.expiry_grace_s)
    return [
        LeaseExpired(time=now, lease_id=le.lease_id, scope=state.scope, pod=le.pod, amount_micro=le.reserved,
                     expires_at=le.expires_at)
        for le in sorted(state.unfinished_leases(), key=lambda le: (le.expires_at, le.lease_id))
        if le.expires_at + grace <= now
    ]
