"""Leases: the distributed budget ledger of one scope, the lease policy, and a pod's view of a lease.

The ledger processor is the single writer of each scope (the scope's
``fb.scope-entries`` partition). It folds two kinds of records into a
``ScopeLedger``:

* ``ScopeEntry``: one request event's effect on one scope (``admit`` opens a
  hold, ``close`` replaces it by a charge), split off ``fb.requests`` by
  ``ledger.splitting``;
* lease events: ``LeaseGranted`` (decided by ``decide_grant`` and
  counted as committed the moment it is granted), ``LeaseReturned`` (a pod
  gives back what it did not spend), ``LeaseExpired`` (decided by
  ``decide_lease_expiries`` for a lease its pod never returned).

The accounting (``settled + held + leased <= limit`` per scope and period)
and the idempotence rules are stated in ``ledger.scope_ledger``.

Where it lives: entries in ``ledger.scope_entries``, the per-scope fold in
``ledger.scope_ledger``, the policy in ``ledger.lease_policy``, a pod's view
in ``ledger.pod_lease``; this module holds the processor's step (``fold``)
and keeps every name importable from here.
"""

from __future__ import annotations

from zoneinfo import ZoneInfo

from ledger.envelope import Event
from ledger.lease_events import LeaseGranted, LeaseRequested
from ledger.lease_policy import LeasePolicy, decide_grant, decide_lease_expiries, slice_size
from ledger.pod_lease import PodLease
from ledger.scope_entries import ENTRIES_TYPE, ENTRY_TYPE, ScopeEntry, entries_batch, entries_of
from ledger.scope_ledger import LeaseState, PeriodTotals, ScopeLedger

__all__ = [
    "ENTRIES_TYPE",
    "ENTRY_TYPE",
    "LeasePolicy",
    "LeaseState",
    "PeriodTotals",
    "PodLease",
    "ScopeEntry",
    "ScopeLedger",
    "decide_grant",
    "decide_lease_expiries",
    "entries_batch",
    "entries_of",
    "fold",
    "slice_size",
]


def fold(state: ScopeLedger, record: ScopeEntry | Event, limit_micro: int | None, tz: ZoneInfo,
         policy: LeasePolicy) -> tuple[bool, LeaseGranted | None]:
    """The ledger processor's step for one record of ``fb.scope-entries``: (changed, grant to send).

    A lease request is answered here and its grant applied at once (committed
    the moment it is granted); when the grant comes back from the topic it is a
    duplicate and changes nothing.
    """
    if isinstance(record, ScopeEntry):
        return state.apply_entry(record), None
    if isinstance(record, LeaseRequested):
        granted = decide_grant(state, record, limit_micro, tz, policy)
        if granted is None:
            return False, None
        state.apply_lease(granted, tz)
        return True, granted
    return state.apply_lease(record, tz), None
