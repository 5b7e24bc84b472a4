"""Leases: the distributed budget ledger of one scope, the lease policy, and a pod's view of a lease.

The ledger processor is the single writer of each scope (the scope's
``fb.scope-entries`` partition). It folds two kinds of records into a
``ScopeLedger``:

* ``ScopeEntry``: one request event's effect on one scope (``admit`` opens a
  hold, ``close`` replaces it by a charge), split off ``fb.requests`` by
  ``ledger.splitting``;
* lease events: ``LeaseGranted`` (decided here by ``decide_grant`` and
  counted as committed the moment it is granted), ``LeaseReturned`` (a pod
  gives back what it did not spend), ``LeaseExpired`` (decided here by
  ``decide_lease_expiries`` for a lease its pod never returned).

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
from datetime import datetime, timedelta, timezone
from typing import Any, Literal
from zoneinfo import ZoneInfo

from ledger.codec import format_time, parse_time
from ledger.events import Event, LeaseExpired, LeaseGranted, LeaseRequested, LeaseReturned
from ledger.periods import RUN_PERIOD, balance_period, period_of

ENTRY_TYPE = "scope.entry"
# A batch of one scope's entries, in order: ``{"type": ENTRIES_TYPE, "scope": s, "rows": [row, ...]}`` with rows
# from ``ScopeEntry.to_row`` (positional, the time in epoch microseconds: no key names or ISO time to parse per
# entry). Batches written before rows, ``{"type": ENTRIES_TYPE, "entries": [entry wire, ...]}``, are still read.
ENTRIES_TYPE = "scope.entries"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICRO = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class ScopeEntry:
    """One request event's effect on one scope; ``id`` is ``{event id}@{scope}``."""

    kind: Literal["admit", "close"]
    scope: str
    event_id: str
    request_id: str
    period: str  # the admission's budget month: a settlement is charged there
    hold: int
    charge: int  # close: what is charged (settled cost, or the full hold on expiry); admit: 0
    lease_id: str | None
    time: datetime
    source: str = ""  # the fb.requests partition it was split from ("" : unknown, no high-water dedupe)
    offset: int = -1

    @property
    def id(self) -> str:
        return f"{self.event_id}@{self.scope}"

    def to_wire(self) -> dict[str, Any]:
        return {"type": ENTRY_TYPE, "kind": self.kind, "scope": self.scope, "event_id": self.event_id,
                "request_id": self.request_id, "period": self.period, "hold": self.hold, "charge": self.charge,
                "lease_id": self.lease_id, "time": format_time(self.time), "source": self.source,
                "offset": self.offset}

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> ScopeEntry:
        return cls(d["kind"], d["scope"], d["event_id"], d["request_id"], d["period"], d["hold"], d["charge"],
                   d["lease_id"], parse_time(d["time"]), d["source"], d["offset"])

    def to_row(self) -> list[Any]:
        """The entry in a batch of its scope's (``ENTRIES_TYPE``): positional, without the scope."""
        return [self.kind, self.event_id, self.request_id, self.period, self.hold, self.charge, self.lease_id,
                (self.time - _EPOCH) // _MICRO, self.source, self.offset]

    @classmethod
    def from_row(cls, scope: str, row: list[Any]) -> ScopeEntry:
        kind, event_id, request_id, period, hold, charge, lease_id, micros, source, offset = row
        if kind not in ("admit", "close") or type(hold) is not int or type(charge) is not int \
                or type(micros) is not int or type(offset) is not int:
            raise ValueError(f"malformed scope entry row {row!r}")
        return cls(kind, scope, event_id, request_id, period, hold, charge, lease_id, _EPOCH + micros * _MICRO,
                   source, offset)


def entries_batch(scope: str, rows: list[list[Any]]) -> dict[str, Any]:
    """The record of a batch of one scope's entries (rows from ``ScopeEntry.to_row``, in order)."""
    return {"type": ENTRIES_TYPE, "scope": scope, "rows": rows}


def entries_of(record: dict[str, Any]) -> list[ScopeEntry]:
    """The entries of an ``ENTRIES_TYPE`` record, rows or (older) wire dicts."""
    rows = record.get("rows")
    if rows is not None:
        scope = record["scope"]
        return [ScopeEntry.from_row(scope, row) for row in rows]
    return [ScopeEntry.from_wire(wire) for wire in record["entries"]]


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
            if known is None or known.status != "open":
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

    def open_leases(self, period: str | None = None) -> list[LeaseState]:
        return [le for le in self.leases.values() if le.status == "open" and (period is None or le.period == period)]

    # --- table value ------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "periods": {p: [t.settled, t.held, t.overrun, t.requests, t.leased] for p, t in sorted(self.periods.items())},
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


# --- the policy ------------------------------------------------------------------------


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
    """Open leases ``expiry_grace_s`` past their expiry: closed, releasing what they still reserve."""
    grace = timedelta(seconds=policy.expiry_grace_s)
    return [
        LeaseExpired(time=now, lease_id=le.lease_id, scope=state.scope, pod=le.pod, amount_micro=le.reserved,
                     expires_at=le.expires_at)
        for le in sorted(state.open_leases(), key=lambda le: (le.expires_at, le.lease_id))
        if le.expires_at + grace <= now
    ]


# --- a pod's view of one lease ------------------------------------------------------------


@dataclass(slots=True)
class PodLease:
    """What a pod may still spend of a grant: granted - (open holds + settled charges).

    A settlement below its hold gives the difference back (spent again); one
    above it (estimator error) takes more, and the balance may go negative.
    ``funded`` (the sum of holds ever funded) goes into the return so the
    ledger knows which admissions are still on their way.
    """

    lease_id: str
    scope: str
    granted: int
    expires_at: datetime
    spent: int = 0
    funded: int = 0
    open: dict[str, tuple[int, datetime | None]] = field(default_factory=dict)  # request -> hold, hold expiry

    @property
    def balance(self) -> int:
        return self.granted - self.spent

    def covers(self, hold: int, now: datetime, margin: timedelta = timedelta(0)) -> bool:
        return self.balance >= hold and now + margin < self.expires_at

    def fund(self, request_id: str, hold: int, hold_expires_at: datetime | None = None) -> None:
        self.open[request_id] = (hold, hold_expires_at)
        self.spent += hold
        self.funded += hold

    def settle(self, request_id: str, charge: int, now: datetime | None = None) -> bool:
        """Replace the hold by ``charge``; past the hold's expiry the ledger may have charged the whole
        hold (``hold.expired``), so the pod does too and never re-spends what it cannot know was released."""
        opened = self.open.pop(request_id, None)
        if opened is None:
            return False
        hold, expires_at = opened
        if expires_at is not None and now is not None and now >= expires_at:
            charge = max(charge, hold)
        self.spent += charge - hold
        return True

    def returned(self, now: datetime, pod: str) -> LeaseReturned:
        return LeaseReturned(time=now, lease_id=self.lease_id, scope=self.scope, pod=pod,
                             amount_micro=max(self.balance, 0), expires_at=self.expires_at, funded_micro=self.funded)


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
