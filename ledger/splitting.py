"""Splitting request events into per-scope ledger entries, with the request's state.

The request processor (one per ``fb.requests`` partition, keyed by team)
keeps a small state per request id: open (what the admission held, on which
lease, for which key and alias) or closed. ``split`` turns each request event
into the ``ScopeEntry`` values for ``fb.scope-entries`` and the request's new
state, and on settlement or expiry one ``Rollup`` row. Idempotence is by
request state: a second admit of an open or closed request, and a close of a
closed or unknown one, yield nothing (a settlement after an expiry stays
charged in full, as in embedded mode).

``decide_hold_expiries`` is the distributed sweeper's decision: every open
request past its hold TTL is charged in full (``hold.expired``), because the
pod that held it is presumed dead; but only in partitions the splitter has
read to the end (``ready``): a worker that restarts behind its backlog must
not expire a request whose settlement it has not read yet. States are plain JSON-able dicts (a Faust
table's values). Pure: no clock, no I/O.

A ``rating.corrected`` (re-rating, long after the request closed, usually
after its state was forgotten) yields one ``correct`` entry per scope whose
cost changed, carrying ``new - old`` as its charge, in the admission's month.
It is idempotent by state too: the request's state (closed, or a new closed
state when it was forgotten) lists the correction numbers it applied
(``fix``), and its ``at`` becomes the correction's time, so retention keeps it
``retention_s`` past the correction: long enough for any re-delivery or a
re-rate applied twice before the archive caught up.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from ledger.codec import format_time, parse_time
from ledger.events import Event, HoldExpired, RatingCorrected, RequestAdmitted, RequestAttempted, RequestSettled
from ledger.leases import ScopeEntry
from ledger.periods import period_of
from ledger.rollups import Rollup, rollup_of

State = dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class Split:
    entries: list[ScopeEntry]
    state: State  # the request's new state (None: unchanged)
    rollup: Rollup | None = None
    stale: bool = False  # an admit refused because it is dated before the retention horizon


@dataclass(slots=True)
class SplitBatch:
    """The effects of many request events, gathered to be written once each.

    Per request its newest state (and the ``fb.requests`` partition it belongs
    to), per scope its entries' rows (``ScopeEntry.to_row``) in source order, per rollup key its
    closes' rows with their source offsets (``ledger.rollups.rows_record``). The splitter reads a
    request's pending state here before the table's, so a batch behaves exactly as the events one by one.
    """

    states: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    entries: dict[str, list[list[Any]]] = field(default_factory=dict)
    rows: dict[str, tuple[str, list[tuple[int, dict[str, int]]]]] = field(default_factory=dict)

    def add(self, request_id: str, result: Split, partition: int, offset: int = -1) -> None:
        for entry in result.entries:
            self.entries.setdefault(entry.scope, []).append(entry.to_row())
        if result.rollup is not None:
            _, rows = self.rows.setdefault(result.rollup.key, (str(partition), []))
            rows.append((offset, result.rollup.counts))
        if result.state is not None:
            self.states[request_id] = (partition, result.state)


_NOTHING = Split([], None)
_STALE = Split([], None, stale=True)


def split(event: Event, state: State, tz: ZoneInfo, source: str = "", offset: int = -1,
          horizon: float = 0.0) -> Split:
    """What ``event`` does to its request's scopes, given the request's current ``state``.

    ``horizon`` (epoch seconds; 0: none) is the retention horizon of the
    event's partition: an admit of an unknown request dated before it is stale.
    """
    if isinstance(event, RequestAdmitted):
        if state is not None:
            return _NOTHING
        if horizon and event.time.timestamp() < horizon:
            return _STALE
        period = period_of(event.time, tz)
        entries = [ScopeEntry("admit", scope, event.id, event.request_id, period, hold, 0,
                              event.leases.get(scope), event.time, source, offset)
                   for scope, hold in event.holds.items()]
        new = {"s": "open", "period": period, "holds": dict(event.holds), "leases": dict(event.leases),
               "team": event.team, "key": event.key_id, "alias": event.alias, "currency": event.currency,
               "at": format_time(event.time), "ttl": event.hold_ttl_s, "ttft": []}
        if source:
            new["src"] = source  # the partition that owns it (ledger.retention.index_states)
        return Split(entries, new)
    if isinstance(event, RequestAttempted):
        if state is None or state["s"] != "open" or event.ttft_ms is None:
            return _NOTHING
        if any(n == event.attempt for n, _ in state["ttft"]):
            return _NOTHING
        return Split([], {**state, "ttft": [*state["ttft"], [event.attempt, event.ttft_ms]]})
    if isinstance(event, (RequestSettled, HoldExpired)):
        if state is None or state["s"] != "open":
            return _NOTHING
        charges = event.cost_by_scope if isinstance(event, RequestSettled) else event.charged
        holds: dict[str, int] = state["holds"]
        entries = [ScopeEntry("close", scope, event.id, event.request_id, state["period"], holds.get(scope, 0),
                              charges.get(scope, 0), state["leases"].get(scope), event.time, source, offset)
                   for scope in sorted(holds.keys() | charges.keys())]
        closed = {"s": "closed", "at": state["at"], "src": source} if source else {"s": "closed", "at": state["at"]}
        if "fix" in state:
            closed["fix"] = state["fix"]
        return Split(entries, closed, rollup_of(state, event))
    if isinstance(event, RatingCorrected):
        return _correct(event, state, tz, source, offset)
    return _NOTHING


def _correct(event: RatingCorrected, state: State, tz: ZoneInfo, source: str, offset: int) -> Split:
    """A correction's entries (see the module docstring) and the state that remembers it."""
    fixes: list[int] = state.get("fix", []) if state is not None else []
    if event.sequence in fixes:
        return _NOTHING
    period = period_of(event.admitted_at, tz)
    entries = [ScopeEntry("correct", scope, event.id, event.request_id, period, 0, delta, None, event.time,
                          source, offset)
               for scope, delta in event.deltas().items() if delta]
    fix = sorted([*fixes, event.sequence])
    if state is not None and state["s"] == "open":  # corrected before its settlement was read: kept at close
        return Split(entries, {**state, "fix": fix})
    new = {"s": "closed", "at": max(format_time(event.time), state["at"] if state else ""), "fix": fix}
    if source:
        new["src"] = source
    return Split(entries, new)


def decide_hold_expiries(states: Iterable[tuple[str, State]], now: datetime,
                         ready: Collection[str] | None = None) -> list[HoldExpired]:
    """Every open request whose hold TTL has run out at ``now``, oldest first: charged in full.

    With ``ready``, only requests of those ``fb.requests`` partitions (their state's ``src``; a state
    without one is always considered)."""
    due = []
    for request_id, state in states:
        if state is None or state.get("s") != "open":
            continue
        if ready is not None and "src" in state and state["src"] not in ready:
            continue
        admitted = parse_time(state["at"])
        if admitted + timedelta(seconds=state["ttl"]) <= now:
            due.append((admitted, request_id, state))
    return [HoldExpired(time=now, request_id=rid, team=s["team"], charged=dict(s["holds"]), currency=s["currency"])
            for _, rid, s in sorted(due, key=lambda d: (d[0], d[1]))]


def rebuild_balances(events: Iterable[Event], tz: ZoneInfo) -> dict[str, Any]:
    """Scope ledgers from request events alone (an auditor's replay): leases are not in ``fb.requests``,
    so funded holds count as plain holds; settled, held, overrun and requests are exact."""
    from ledger.leases import ScopeLedger

    states: dict[str, State] = {}
    scopes: dict[str, ScopeLedger] = {}
    for event in events:
        if event.request_id is None:
            continue
        result = split(event, states.get(event.request_id), tz)
        if result.state is not None:
            states[event.request_id] = result.state
        for entry in result.entries:
            scopes.setdefault(entry.scope, ScopeLedger(entry.scope)).apply_entry(entry)
    return scopes
