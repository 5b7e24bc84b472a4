"""How long the request processor remembers closed requests, and which ones it may forget now.

The distributed request processor (``ledger.splitting.split`` in the worker)
keeps a state per request id: open, then closed. A closed state is only there
for idempotence: a second ``request.admitted`` of a closed request must not
open a new hold (it would be charged again). A late ``request.settled`` or
``hold.expired`` of a request whose state was forgotten is ignored exactly as
one of a closed request is (a close of an unknown request does nothing), so
forgetting never un-charges anything; only a duplicate *admit* needs the state.

**Rule.** Per ``fb.requests`` partition, a *clock*: the latest event time the
partition has shown, never ahead of the wall clock (a pod whose clock runs
fast cannot drag it forward). The *horizon* is ``clock - retention_s``.
A closed state whose admission is before the horizon may be forgotten, and
an admit dated before the horizon whose request the processor does not know
is *stale*: refused, as the embedded ledger refuses admits older than its
pruned months (``ledger.balances``). So a forgotten request can never be
reopened by a late duplicate, and the only cost of forgetting is that an
admission delivered more than ``retention_s`` after newer events of its
partition is refused (the worker logs it; replay from the archive, which has
no horizon, shows it as a difference).

**Why time, not months.** The embedded ledger keeps two months of closed ids;
at distributed rates that is billions of states (about 0.45 KB each in the
worker's memory). The clock is the partition's *event* time, not the wall
clock, so a worker that was down for a day and works through its backlog
refuses nothing. What arrives late relative to its partition is a pod's
spool: events a pod wrote to disk while Kafka was unreachable (or before it
died and restarted), replayed when it reconnects, dated when they happened.
Pods fail closed once their leases run out (``lease_ttl_s``, 60 s), so a spool
holds at most a minute or so of admissions, but it may wait as long as the
outage lasts. Hence the default retention (``distributed.request_retention_s``)
of 6 hours: far above a Kafka outage the pods are expected to ride out plus
the hold TTL (15 minutes; a hold's close comes at most a TTL after its
admission), and about 1 GB of closed states at 100 requests/s. Lower it for
higher rates, raise it if a pod's spool may wait longer.

**Faust.** A table key may only be written (and deleted: a delete is a
changelog tombstone) while an event of the partition that owns it is being
processed, so forgetting happens in the request agent, a few keys per event
(``due``), from an in-memory index of each partition's closed ids by
admission minute; the index is rebuilt from the table after recovery
(``index_states``: closed states carry their partition as ``src``). Before
deleting, the agent persists the horizon it deletes under in the table
(``horizon_key``, one write per minute of admissions at most), so after a
restart duplicates of forgotten requests are still stale. Pure: no clock, no
I/O; times are epoch seconds passed in.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, MutableMapping
from typing import Any

from ledger.codec import parse_time

DEFAULT_RETENTION_S = 6 * 3600
_HORIZON_PREFIX = "\x00horizon/"  # cannot be a request id: HTTP header values have no NUL
_BUCKET_S = 60


def horizon_key(source: str) -> str:
    """The table key of one partition's persisted horizon (written from that partition's events)."""
    return _HORIZON_PREFIX + source


def horizon_state(horizon: float) -> dict[str, Any]:
    """The table value under ``horizon_key``: a dict like request states, so state scans can skip it."""
    return {"s": "horizon", "t": horizon}


class ClosedRequests:
    """One ``fb.requests`` partition's closed request ids by admission minute, its clock and its horizon."""

    __slots__ = ("_buckets", "_minutes", "clock", "floor", "persisted", "retention_s")

    def __init__(self, retention_s: float, floor: float = 0.0) -> None:
        self.retention_s = retention_s
        self.clock = 0.0  # the latest event time seen (epoch seconds), capped by the wall clock
        self.floor = floor  # a horizon already persisted: the horizon never goes below it
        self.persisted = floor  # the latest horizon written to the table
        self._buckets: dict[int, list[str]] = {}  # admission minute -> closed request ids
        self._minutes: list[int] = []  # heap of the buckets' minutes

    @property
    def horizon(self) -> float:
        """Admits before this (epoch seconds) are stale; closed states admitted before it may go."""
        return max(self.clock - self.retention_s, self.floor)

    def observe(self, event_time: float, now: float) -> None:
        """An event of this partition dated ``event_time`` was processed at wall time ``now``."""
        t = event_time if event_time < now else now
        if t > self.clock:
            self.clock = t

    def stale(self, admitted_at: float) -> bool:
        return admitted_at < self.horizon

    def closed(self, request_id: str, admitted_at: float) -> None:
        """Index a request that was just closed (or found closed at recovery)."""
        minute = int(admitted_at // _BUCKET_S)
        bucket = self._buckets.get(minute)
        if bucket is None:
            bucket = self._buckets[minute] = []
            heapq.heappush(self._minutes, minute)
        bucket.append(request_id)

    def has_due(self) -> bool:
        """Whether some indexed state may be forgotten now (cheap: called for every event)."""
        return bool(self._minutes) and (self._minutes[0] + 1) * _BUCKET_S <= self.horizon

    def due(self, limit: int) -> tuple[list[str], float]:
        """Up to ``limit`` ids to forget now (taken out of the index), and the horizon that covers them.

        Every returned id was admitted before the returned horizon; persist that
        horizon before deleting the states (``persisted`` tells whether it is new).
        """
        horizon = self.horizon
        out: list[str] = []
        covered = 0.0
        while self._minutes and len(out) < limit:
            minute = self._minutes[0]
            end = (minute + 1) * _BUCKET_S
            if end > horizon:
                break
            bucket = self._buckets[minute]
            take = min(limit - len(out), len(bucket))
            out += bucket[len(bucket) - take:]
            del bucket[len(bucket) - take:]
            covered = end
            if not bucket:
                heapq.heappop(self._minutes)
                del self._buckets[minute]
        return out, covered

    def __len__(self) -> int:
        return sum(len(b) for b in self._buckets.values())


def forget_due(table: MutableMapping[str, Any], index: ClosedRequests, source: str, limit: int) -> int:
    """Delete up to ``limit`` due closed states of partition ``source`` from ``table``; how many went.

    The horizon that covers them is written first (its key is in the same
    partition), so the changelog never holds a delete without it.
    """
    ids, covered = index.due(limit)
    if covered > index.persisted:
        table[horizon_key(source)] = horizon_state(covered)
        index.persisted = covered
    gone = 0
    for request_id in ids:
        state = table.get(request_id)
        # a state corrected since it was indexed carries a later ``at`` and is indexed again under it
        if isinstance(state, dict) and state.get("s") == "closed" and admitted_epoch(state) < covered:
            del table[request_id]
            gone += 1
    return gone


def admitted_epoch(state: dict[str, Any]) -> float:
    """A request state's ``at`` in epoch seconds: its admission, or for a re-rated request its latest
    correction (``ledger.splitting``): what retention counts from."""
    return parse_time(state["at"]).timestamp()


def index_states(items: Iterable[tuple[str, Any]], retention_s: float,
                 sources: set[str] | None = None) -> tuple[dict[str, ClosedRequests], dict[str, dict[str, Any]]]:
    """Rebuild the per-partition indexes (and the open states, for the sweeper) from a recovered table.

    ``sources`` limits both to the partitions this worker owns (Faust signals
    the end of recovery before it drops the keys of revoked partitions). States
    written before they carried ``src`` cannot be placed: open ones are kept
    (their expiry is idempotent), closed ones stay in the table.
    """
    floors: dict[str, float] = {}
    closed: list[tuple[str, str, float]] = []
    open_states: dict[str, dict[str, Any]] = {}
    for key, state in items:
        if not isinstance(state, dict):
            continue
        kind = state.get("s")
        if kind == "open":
            if sources is None or "src" not in state or state["src"] in sources:
                open_states[key] = state
        elif kind == "closed" and "src" in state:
            closed.append((state["src"], key, admitted_epoch(state)))
        elif kind == "horizon" and key.startswith(_HORIZON_PREFIX):
            floors[key[len(_HORIZON_PREFIX):]] = state["t"]
    indexes: dict[str, ClosedRequests] = {}
    for source, floor in floors.items():
        if sources is None or source in sources:
            indexes[source] = ClosedRequests(retention_s, floor)
    for source, request_id, at in closed:
        if sources is None or source in sources:
            index = indexes.get(source)
            if index is None:
                index = indexes[source] = ClosedRequests(retention_s)
            index.closed(request_id, at)
    return indexes, open_states
