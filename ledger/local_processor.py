"""The ledger processor of ``farebox serve --workers N``: every scope's lease ledger in one process.

Distributed mode splits this work across Kafka partitions and Faust agents
(``streams.worker``); on one machine the owner process folds the same
records with the same pure functions, in the order of its SQLite log:

* a request event goes through ``ledger.splitting.split`` (the request's
  state: open, then closed) and each resulting ``ScopeEntry`` through
  ``ledger.leases.fold`` on its scope's ``ScopeLedger``;
* a lease event (``lease.requested`` / ``returned`` / ``expired`` /
  ``granted``) goes through ``fold`` too: a request is answered with a grant,
  committed the moment it is decided;
* a soft-threshold notice is decided per entry (``ledger.thresholds``).

``apply`` returns the events the step decided (grants, notices); the caller
appends them to the log, and when they come back from it they change nothing
(a grant is already applied; a notice only marks its state). ``due`` decides
hold and lease expiries at ``now``. Offsets are the log's: an entry carries
the offset of the event that produced it (source ``log``), so an event folded
twice is skipped by the scope's high-water mark, and a duplicate event id the
log acknowledged with its old offset changes nothing.

Closed request states are forgotten ``retention_s`` after their admission,
by the rule of ``ledger.retention`` (one clock: the log's event time). Pure:
no clock, no I/O; ``now`` is passed in.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from ledger.envelope import Event
from ledger.events import BudgetThresholdCrossed, RequestEvent
from ledger.leases import LeasePolicy, ScopeEntry, ScopeLedger, decide_lease_expiries, fold
from ledger.periods import period_of
from ledger.retention import DEFAULT_RETENTION_S, ClosedRequests, admitted_epoch, forget_due
from ledger.splitting import decide_hold_expiries, split
from ledger.thresholds import apply_notice, budget_state, decide_soft_notice

SOURCE = "log"
_LEASE_TYPES = ("lease.requested", "lease.granted", "lease.returned", "lease.expired")


class LocalProcessor:
    """Request states and scope ledgers of one machine, folded in log order (see the module docstring)."""

    def __init__(self, tz: ZoneInfo, limit_for: Callable[[str], int | None], soft_pct_for: Callable[[str], int],
                 currency_for: Callable[[], str], policy: LeasePolicy,
                 retention_s: float = DEFAULT_RETENTION_S) -> None:
        self.tz = tz
        self.limit_for = limit_for
        self.soft_pct_for = soft_pct_for
        self.currency_for = currency_for
        self.policy = policy
        self.requests: dict[str, dict[str, Any]] = {}  # request id -> state (ledger.splitting)
        self.open: dict[str, dict[str, Any]] = {}  # the open ones, for the hold sweeper
        self.scopes: dict[str, ScopeLedger] = {}
        self.closed = ClosedRequests(retention_s)
        self.dirty: set[str] = set()  # scopes whose projection row changed since ``take_dirty``
        self.offset = 0  # the last log offset folded

    def scope(self, scope: str) -> ScopeLedger:
        ledger = self.scopes.get(scope)
        if ledger is None:
            ledger = self.scopes[scope] = ScopeLedger(scope)
        return ledger

    def apply(self, event: Event, offset: int, wall_s: float) -> list[Event]:
        """Fold the event the log holds at ``offset``: the grants and notices it decided, to append."""
        if offset <= self.offset:
            return []  # folded already (a duplicate acknowledged with its first offset)
        self.offset = offset
        if isinstance(event, RequestEvent):
            return self._request(event, offset, wall_s)
        if isinstance(event, BudgetThresholdCrossed):
            if apply_notice(self.scope(event.scope), event):
                self.dirty.add(event.scope)
            return []
        if event.type in _LEASE_TYPES:
            scope: str = event.scope  # type: ignore[attr-defined]
            changed, granted = fold(self.scope(scope), event, self.limit_for(scope), self.tz, self.policy)
            if changed:
                self.dirty.add(scope)
            return [granted] if granted is not None else []
        return []

    def _request(self, event: RequestEvent, offset: int, wall_s: float) -> list[Event]:
        rid = event.request_id
        self.closed.observe(event.time.timestamp(), wall_s)
        result = split(event, self.requests.get(rid), self.tz, SOURCE, offset, self.closed.horizon)
        if result.state is not None:
            self.requests[rid] = result.state
            if result.state["s"] == "open":
                self.open[rid] = result.state
            else:
                self.open.pop(rid, None)
                self.closed.closed(rid, admitted_epoch(result.state))
        out: list[Event] = []
        for entry in result.entries:
            out += self._entry(entry)
        if self.closed.has_due():
            forget_due(self.requests, self.closed, SOURCE, 100)
        return out

    def _entry(self, entry: ScopeEntry) -> list[Event]:
        ledger, limit = self.scope(entry.scope), self.limit_for(entry.scope)
        changed, _ = fold(ledger, entry, limit, self.tz, self.policy)
        if not changed:
            return []
        self.dirty.add(entry.scope)
        notice = decide_soft_notice(ledger, entry, limit, self.soft_pct_for(entry.scope), self.currency_for())
        return [notice] if notice is not None else []

    def due(self, now: datetime) -> list[Event]:
        """Hold expiries (an open request past its TTL, charged in full) and lease expiries at ``now``."""
        out: list[Event] = list(decide_hold_expiries(list(self.open.items()), now))
        keep_s = self.policy.ttl_s + 2 * self.policy.expiry_grace_s
        for ledger in self.scopes.values():
            out += decide_lease_expiries(ledger, now, self.policy)
            ledger.forget_closed(now, keep_s)
        return out

    def row(self, scope: str, now: datetime) -> dict[str, str]:
        """The scope's projection row of the period of ``now``, laid out as the worker's Redis hash
        (``streams.projections.scope_fields``), every value a string."""
        period = period_of(now, self.tz)
        ledger, limit = self.scope(scope), self.limit_for(scope)
        t = ledger.totals(period)
        return {"period": period, "settled": str(t.settled), "held": str(t.held), "leased": str(t.leased),
                "overrun": str(t.overrun), "requests": str(t.requests), "limit": "" if limit is None else str(limit),
                "state": budget_state(ledger, period, limit, self.soft_pct_for(scope))}

    def take_dirty(self) -> set[str]:
        dirty, self.dirty = self.dirty, set()
        return dirty
