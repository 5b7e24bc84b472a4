"""One scope's distributed budget ledger: balances per period, its leases, the high-water offsets it has read.

The ledger processor is the single writer of each scope (the scope's
``fb.scope-entries`` partition) and folds ``ScopeEntry`` records and lease
events into a ``ScopeLedger``.

Accounting, per scope and period: ``settled + held + leased <= limit``
(except recorded overrun), where ``leased`` is the sum over leases of what a
lease still reserves beyond the holds the ledger has seen:

* open lease: ``max(granted - consumed, 0)``; ``consumed`` is the funded
  holds seen (open) and the charges of funded requests seen closed, so a
  funded admit moves money from ``leased`` to ``held`` and a settlement below
  its hold gives the difference back to the lease (the pod re-spends it);
* returned lease: ``max(min(funded_by_pod - funded_seen, granted - consumed), 0)``:
  the holds the pod admitted whose admissions have not arrived yet (a return
  travels straight to ``fb.scope-entries`` and may overtake them), but never
  more than the lease has left: one may re-spend a hold the ledger still counts
  (its settlement, below the hold, is on its way too); the rest is released.
  ``consumed`` keeps counting; closed once every funded admission arrived;
* expired lease: 0. Its still-open funded holds stay in ``held`` until their
  own expiry charges them; what the pod never spent is released.

Idempotence: an entry carries the ``fb.requests`` partition and offset it was
split from, and a scope skips an entry at or below the high-water offset of
its source (the splitter emits in source order, one producer batch in
flight per partition); lease events are idempotent by lease state (a granted,
returned or expired lease ignores the same verb again; closed lease ids are
remembered until ``prune``). Pure: no clock, no I/O; ``tz`` and ``now`` come in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal
from zoneinfo import ZoneInfo

from ledger.codec import format_time, parse_time
from ledger.envelope import Event
from ledger.lease_events import LeaseExpired, LeaseGranted, LeaseReturned
from ledger.periods import RUN_PERIOD, balance_period, period_of
from ledger.scope_entries import ScopeEntry


@dataclass(slots=True)
class LeaseState:
    """The processor's view of one lease (see the module docstring for ``reserved``)."""

    lease_id: str
    pod: str
    period: str
    granted: int
    expires_at: datetime
    consumed: int = 0
    funded_seen: int = 0
    status: Literal["open", "returned", "expired"] = "open"
    funded_by_pod: int = 0

    @property
    def reserved(self) -> int:
        if self.status == "open":
            return max(self.granted - self.consumed, 0)
        if self.status == "returned":
            return max(min(self.funded_by_pod - self.funded_seen, self.granted - self.consumed), 0)
        return 0

    @property
    def done(self) -> bool:
        """Closed and nothing it must reserve for can still arrive (expired, or every funded admission seen)."""
        return self.status == "expired" or (self.status == "returned" and self.funded_seen >= self.funded_by_pod)


@dataclass(slots=True)
class PeriodTotals:
    settled: int = 0
    held: int = 0
    overrun: int = 0
    requests: int = 0
    leased: int = 0
    corrected: int = 0  # re-rating corrections' net sum, included in ``settled``

    @property
    def spent(self) -> int:
        """What counts against the limit: settled + held + leased-unspent."""
        return self.settled + self.held + self.leased


@dataclass(slots=True)
class ScopeLedger:
    """One scope's balances per period, its leases, and the high-water offsets of its sources."""

    scope: str
    periods: dict[str, PeriodTotals] = field(default_factory=dict)
    leases: dict[str, LeaseState] = field(default_factory=dict)
    # lease id -> (its period, its expiry in epoch seconds; 0: unknown) while a late duplicate may still come
    closed_leases: dict[str, tuple[str, int]] = field(default_factory=dict)
    high_water: dict[str, int] = field(default_factory=dict)
    soft_crossed: set[str] = field(default_factory=set)  # balance periods whose soft-threshold notice was decided

    def totals(self, period: str) -> PeriodTotals:
        key = balance_period(self.scope, period)
        totals = self.periods.get(key)
        if totals is None:
            totals = self.periods[key] = PeriodTotals()
        return totals

    def spent(self, period: str) -> int:
        totals = self.periods.get(balance_period(self.scope, period))
        return 0 if totals is None else totals.spent

    # --- the fold -----------------------------------------------------------------

    def apply_entry(self, entry: ScopeEntry) -> bool:
        """Fold a request's admit or close into this scope; False for a duplicate."""
        if entry.source:
            if entry.offset <= self.high_water.get(entry.source, -1):
                return False
            self.high_water[entry.source] = entry.offset
        totals = self.totals(entry.period)
        lease = self.leases.get(entry.lease_id) if entry.lease_id else None
        before = lease.reserved if lease else 0
        if entry.kind == "correct":
            totals.settled += entry.charge
            totals.corrected += entry.charge
            return True
        if entry.kind == "admit":
            totals.held += entry.hold
            totals.requests += 1
            if lease is not None:
                lease.funded_seen += entry.hold
                lease.consumed += entry.hold
        else:
            totals.held -= entry.hold
            totals.settled += entry.charge
            totals.overrun += max(entry.charge - entry.hold, 0)
            if lease is not None:
                lease.consumed += entry.charge - entry.hold
        if lease is not None:
            self._moved(lease, before)
        return True

    def apply_lease(self, event: Event, tz: ZoneInfo) -> bool:
        """Fold a lease event; False when it changed nothing (duplicate, unknown lease, a request)."""
        if isinstance(event, LeaseGranted):
            if event.lease_id in self.leases or event.lease_id in self.closed_leases:
                return False
            assert event.expires_at is not None
            lease = LeaseState(event.lease_id, event.pod, period_of(event.time, tz), event.amount_micro,
                               event.expires_at)
            self.leases[lease.lease_id] = lease
            self._moved(lease, 0)
            return True
        if isinstance(event, (LeaseReturned, LeaseExpired)):
            known = self.leases.get(event.lease_id)
            # an open lease is returned or expires; a returned one still waiting for funded admissions may expire
            if known is None or not (known.status == "open" or (known.status == "returned"
                                                                 and isinstance(event, LeaseExpired))):
                return False
            lease = known
            before = lease.reserved
            if isinstance(event, LeaseReturned):
                lease.status, lease.funded_by_pod = "returned", event.funded_micro
            else:
                lease.status = "expired"
            self._moved(lease, before)
            return True
        return False

    def _moved(self, lease: LeaseState, before: int) -> None:
        self.totals(lease.period).leased += lease.reserved - before
        if lease.done:
            del self.leases[lease.lease_id]
            self.closed_leases[lease.lease_id] = (lease.period, int(lease.expires_at.timestamp()))

    def mark_soft(self, period: str) -> bool:
        """Remember that the soft-threshold notice of ``period`` was decided; False if it already was."""
        key = balance_period(self.scope, period)
        if key in self.soft_crossed:
            return False
        self.soft_crossed.add(key)
        return True

    def prune(self, before_period: str) -> None:
        """Forget closed lease ids and threshold marks of months before ``before_period`` (their events
        are long delivered); a run's mark stays with its balance."""
        self.closed_leases = {k: v for k, v in self.closed_leases.items() if v[0] >= before_period}
        self.soft_crossed = {p for p in self.soft_crossed if p >= before_period or p == RUN_PERIOD}

    def forget_closed(self, now: datetime, keep_s: int) -> int:
        """Forget closed lease ids whose lease expired more than ``keep_s`` ago; how many went.

        A closed id is kept to ignore a late duplicate of its grant (read back from
        the topic just after it was decided), return or expiry. Past its expiry plus
        the expiry grace no pod funds from it and the processor has expired it, so
        with ``keep_s`` >= ttl + 2 x grace nothing about it can still arrive; without
        this a busy scope's value (written on every change) grows all month.
        """
        cutoff = now.timestamp() - keep_s
        gone = [k for k, (_, expires) in self.closed_leases.items() if expires and expires < cutoff]
        for lease_id in gone:
            del self.closed_leases[lease_id]
        return len(gone)

    # --- queries ----------------------------------------------------------------------

    def unfinished_leases(self) -> list[LeaseState]:
        """Leases that still reserve or may (open, or returned and waiting for admissions they funded)."""
        return [le for le in self.leases.values() if le.status in ("open", "returned")]

    def open_leases(self, period: str | None = None) -> list[LeaseState]:
        return [le for le in self.leases.values() if le.status == "open" and (period is None or le.period == period)]

    # --- table value ------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "periods": {p: [t.settled, t.held, t.overrun, t.requests, t.leased, t.corrected]
                        for p, t in sorted(self.periods.items())},  # values written before corrections have 5
            "leases": [[le.lease_id, le.pod, le.period, le.granted, format_time(le.expires_at), le.consumed,
                        le.funded_seen, le.status, le.funded_by_pod] for le in self.leases.values()],
            "closed_leases": {k: list(v) for k, v in sorted(self.closed_leases.items())},
            "high_water": dict(sorted(self.high_water.items())),
            "soft_crossed": sorted(self.soft_crossed),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ScopeLedger:
        state = cls(d["scope"])
        state.periods = {p: PeriodTotals(*v) for p, v in d["periods"].items()}
        for lid, pod, period, granted, exp, consumed, seen, status, by_pod in d["leases"]:
            state.leases[lid] = LeaseState(lid, pod, period, granted, parse_time(exp), consumed, seen, status, by_pod)
        state.closed_leases = {k: (v, 0) if isinstance(v, str) else (v[0], v[1])  # str: written before expiries
                               for k, v in d["closed_leases"].items()}
        state.high_water = dict(d["high_water"])
        state.soft_crossed = set(d.get("soft_crossed", ()))  # absent in values written before notices
        return state
