"""The budget ledger: scope balances and open holds, folded from events.

``Ledger`` mutates in place (a fold over a million events must not copy a
dict per event), but it is still a pure function of the event sequence: no
clock, no I/O, no randomness; the time zone is a constructor argument and
``now`` is passed to the queries that need it. Folding the same events in the
same order always gives the same ledger, byte for byte (``to_bytes``).

What each event does (``apply`` returns False when it changed nothing):

* ``RequestAdmitted`` opens a hold of ``holds[scope]`` on every scope, in the
  budget period of the event's time, and counts one request per scope.
  List every budget scope the request touches in ``holds`` (0 where it is
  not limited), or its calls are not counted.
* ``RequestSettled`` closes the hold: held -= hold, settled += cost, and
  overrun += max(cost - hold, 0), per scope. The cost is charged to the
  period of the *admission*, even if settlement comes after the month ends.
* ``HoldExpired`` closes the hold charging ``charged`` (the full hold).
* ``RatingCorrected`` (re-rating) adds its ``new - old`` cost per scope to
  ``settled`` and to ``corrected`` in the month of the request's admission
  (``admitted_at`` in the ledger's zone): the one way settled money changes
  after settlement. Deltas add, so the fold does not care whether the
  correction arrives before or after the settlement it corrects; each
  correction id counts once (kept per month, forgotten by ``prune`` with the
  closed ids; a correction of a pruned month is ignored like a stale admit).
* ``BudgetThresholdCrossed`` marks (scope, period) so the notice is sent once.
* Attempts, leases and config events change no balance (leases arrive with
  the distributed mode).

Idempotence without remembering every event id: a request is *open* (its
hold is in ``_holds``) or *closed* (its id is in ``_closed``,
``ledger.closed_ids``). An admit of an open or closed request, and a
settle/expire of a closed or unknown one, change nothing. The memory bound:
closed ids are kept per hold period until ``prune(before)`` forgets the
periods before ``before`` (call it at each new month with the previous month,
so only two months of ids are held); after that, admits dated before the
pruned horizon are refused as stale, so a late duplicate cannot reopen a
forgotten request. A ledger folding a log that is its own idempotence (the
embedded gateway's) keeps closed ids for a window instead
(``Ledger(tz, closed_keep_s=...)``, ``keep_closed_for``): flat memory
however long it runs.

Balances are kept per (scope, period); ``run:`` scopes use a single
pseudo-period for the whole run (``ledger.periods.balance_period``), so a
run's money and call caps do not reset at midnight on the 1st.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import orjson

from ledger.closed_ids import ClosedIds
from ledger.codec import format_time, parse_time
from ledger.errors import CheckpointError, CodecError
from ledger.events import (
    BudgetThresholdCrossed,
    Event,
    HoldExpired,
    RatingCorrected,
    RequestAdmitted,
    RequestSettled,
)
from ledger.periods import RUN_PERIOD, balance_period, period_of, previous_period

# 2: ``corrected`` per balance and the correction ids (format 1 is read as none); 3: closed ids may be kept for a
# window (``closed_keep_s``, ``closed_by_minute``; formats 1 and 2 are read as the month mode)
CHECKPOINT_FORMAT = 3


@dataclass(frozen=True, slots=True)
class ScopeBalance:
    """One scope's money in one period, in micro-units; ``requests`` counts admissions.

    ``settled`` includes re-rating corrections; ``corrected`` is their net sum, so
    ``settled - corrected`` is what settlement originally charged."""

    settled: int = 0
    held: int = 0
    overrun: int = 0
    requests: int = 0
    corrected: int = 0

    @property
    def spent(self) -> int:
        """Settled plus held: what counts against the limit."""
        return self.settled + self.held


@dataclass(frozen=True, slots=True)
class Hold:
    """An admitted request's money held on each scope until it settles or expires."""

    request_id: str
    period: str  # the admission's budget month: where the settlement is charged
    amounts: Mapping[str, int]
    admitted_at: datetime
    ttl_s: int
    team: str
    currency: str

    @property
    def expires_at(self) -> datetime:
        return self.admitted_at + timedelta(seconds=self.ttl_s)


class _Totals:
    """The mutable counterpart of ``ScopeBalance``; ``touched`` is the latest month it moved in."""

    __slots__ = ("corrected", "held", "overrun", "requests", "settled", "touched")

    def __init__(self, settled: int = 0, held: int = 0, overrun: int = 0, requests: int = 0, touched: str = "",
                 corrected: int = 0) -> None:
        self.settled = settled
        self.held = held
        self.overrun = overrun
        self.requests = requests
        self.touched = touched
        self.corrected = corrected

    def value(self) -> ScopeBalance:
        return ScopeBalance(self.settled, self.held, self.overrun, self.requests, self.corrected)


_EMPTY = ScopeBalance()


class Ledger:
    """Scope balances and open holds; ``apply`` events in log order."""

    def __init__(self, tz: ZoneInfo, closed_keep_s: int | None = None) -> None:
        if not getattr(tz, "key", None):
            raise ValueError("the ledger needs a named zone (ZoneInfo('Asia/Kolkata')), to record in checkpoints")
        self.tz = tz
        self._totals: dict[tuple[str, str], _Totals] = {}
        self._holds: dict[str, Hold] = {}
        self._closed = ClosedIds(closed_keep_s)
        self._soft: set[tuple[str, str]] = set()  # (scope, balance period) with a threshold notice
        self._corrections: dict[str, set[str]] = {}  # admission period -> applied correction ids
        self._horizon = ""  # months before this were pruned

    # --- the fold -----------------------------------------------------------------

    def apply(self, event: Event) -> bool:
        """Fold one event in; False when it changed nothing (duplicate, unknown, no-op type)."""
        handler = _HANDLERS.get(type(event))
        return handler(self, event) if handler is not None else False

    def _admit(self, event: RequestAdmitted) -> bool:
        request_id = event.request_id
        if request_id in self._holds:
            return False
        period = period_of(event.time, self.tz)
        if period < self._horizon:
            return False  # stale: its period was pruned, we cannot tell whether it closed
        if self._closed.has(request_id, period):
            return False
        self._holds[request_id] = Hold(
            request_id, period, event.holds, event.time, event.hold_ttl_s, event.team, event.currency
        )
        for scope, amount in event.holds.items():
            totals = self._totals_for(scope, period)
            totals.held += amount
            totals.requests += 1
        return True

    def _settle(self, event: RequestSettled) -> bool:
        return self._close(event.request_id, event.cost_by_scope, event.time)

    def _expire(self, event: HoldExpired) -> bool:
        return self._close(event.request_id, event.charged, event.time)

    def _close(self, request_id: str, charges: Mapping[str, int], at: datetime) -> bool:
        hold = self._holds.pop(request_id, None)
        if hold is None:
            return False  # already closed, or never admitted here
        amounts = hold.amounts
        for scope in amounts.keys() | charges.keys():
            held = amounts.get(scope, 0)
            cost = charges.get(scope, 0)
            totals = self._totals_for(scope, hold.period)
            totals.held -= held
            totals.settled += cost
            if cost > held:
                totals.overrun += cost - held
        if hold.period >= self._horizon:
            self._closed.add(request_id, hold.period, at)
        return True

    def _correct(self, event: RatingCorrected) -> bool:
        period = period_of(event.admitted_at, self.tz)
        if period < self._horizon:
            return False  # its month was pruned: we cannot tell whether it was applied
        applied = self._corrections.setdefault(period, set())
        if event.id in applied:
            return False
        applied.add(event.id)
        for scope, delta in event.deltas().items():
            totals = self._totals_for(scope, period)
            totals.settled += delta
            totals.corrected += delta
        return True

    def _threshold(self, event: BudgetThresholdCrossed) -> bool:
        if event.period < self._horizon:
            return False
        mark = (event.scope, balance_period(event.scope, event.period))
        if mark in self._soft:
            return False
        self._soft.add(mark)
        return True

    def _totals_for(self, scope: str, period: str) -> _Totals:
        key = (scope, RUN_PERIOD if scope.startswith("run:") else period)
        totals = self._totals.get(key)
        if totals is None:
            totals = self._totals[key] = _Totals(touched=period)
        elif period > totals.touched:
            totals.touched = period
        return totals

    # --- queries --------------------------------------------------------------------

    def balance(self, scope: str, period: str) -> ScopeBalance:
        """The scope's balance in ``period`` (a run's whole-life balance for ``run:`` scopes)."""
        totals = self._totals.get((scope, balance_period(scope, period)))
        return _EMPTY if totals is None else totals.value()

    def available(self, scope: str, period: str, limit_micro: int) -> int:
        """limit - settled - held: what a new hold may take (negative after an overrun)."""
        totals = self._totals.get((scope, balance_period(scope, period)))
        return limit_micro if totals is None else limit_micro - totals.settled - totals.held

    def threshold_crossed(self, scope: str, period: str) -> bool:
        """Whether a ``BudgetThresholdCrossed`` for this scope and period was applied."""
        return (scope, balance_period(scope, period)) in self._soft

    def balances(self) -> dict[tuple[str, str], ScopeBalance]:
        """Every (scope, balance period) the ledger knows, for reports and tests."""
        return {key: t.value() for key, t in sorted(self._totals.items())}

    def hold(self, request_id: str) -> Hold | None:
        return self._holds.get(request_id)

    def open_holds(self) -> list[Hold]:
        """Open holds, oldest admission first."""
        return sorted(self._holds.values(), key=_hold_order)

    def expired_holds(self, now: datetime) -> list[Hold]:
        """Open holds whose TTL has run out at ``now`` (admitted_at + ttl_s <= now), oldest first."""
        return sorted((h for h in self._holds.values() if h.expires_at <= now), key=_hold_order)

    def is_closed(self, request_id: str, period: str) -> bool:
        return self._closed.has(request_id, period)

    def keep_closed_for(self, keep_s: int, now: datetime) -> None:
        """Keep closed ids for ``keep_s`` seconds from now on (see ``ledger.closed_ids``: only for a log that is
        its own idempotence); the ids kept so far count as closed at ``now``."""
        self._closed.keep_for(keep_s, now)

    @property
    def closed_count(self) -> int:
        """How many closed ids are remembered (the memory the window bounds)."""
        return len(self._closed)

    @property
    def horizon(self) -> str:
        """Months before this one were pruned ("" if never)."""
        return self._horizon

    # --- bounded memory -------------------------------------------------------------

    def prune_for(self, now: datetime) -> bool:
        """Keep the current and the previous month (in the ledger's zone); True if it pruned.

        Runners call it periodically; it is a no-op until the month turns.
        """
        keep_from = previous_period(period_of(now, self.tz))
        if keep_from <= self._horizon:
            return False
        self.prune(keep_from)
        return True

    def prune(self, before_period: str) -> None:
        """Forget closed ids, threshold marks and idle balances of months before ``before_period``.

        Balances with an open hold are kept. A ``run:`` balance is forgotten when
        the run has not moved since before ``before_period``. Afterwards admits
        dated before ``before_period`` are ignored (see the module docstring).
        """
        if before_period <= self._horizon:
            return
        self._horizon = before_period
        in_use = {
            (scope, balance_period(scope, hold.period)) for hold in self._holds.values() for scope in hold.amounts
        }
        for key in [k for k, t in self._totals.items() if t.touched < before_period and k not in in_use]:
            del self._totals[key]
        self._closed.prune(before_period)
        for period in [p for p in self._corrections if p < before_period]:
            del self._corrections[period]
        self._soft = {mark for mark in self._soft if _still_needed(mark, self._totals, before_period)}

    # --- checkpoints ----------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """A canonical, versioned snapshot (orjson): equal ledgers give equal bytes."""
        state = {
            "format": CHECKPOINT_FORMAT,
            "tz": self.tz.key,
            "horizon": self._horizon,
            "balances": [
                [scope, bp, t.settled, t.held, t.overrun, t.requests, t.touched, t.corrected]
                for (scope, bp), t in sorted(self._totals.items())
            ],
            "holds": [
                [h.request_id, h.period, dict(h.amounts), format_time(h.admitted_at), h.ttl_s, h.team, h.currency]
                for h in self.open_holds()
            ],
            **self._closed.state(),
            "soft": sorted([scope, bp] for scope, bp in self._soft),
            "corrections": {period: sorted(ids) for period, ids in sorted(self._corrections.items()) if ids},
        }
        return orjson.dumps(state)

    @classmethod
    def from_bytes(cls, data: bytes) -> Ledger:
        """Rebuild a ledger from ``to_bytes`` output; ``CheckpointError`` if unreadable."""
        try:
            state = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise CheckpointError(f"checkpoint is not valid JSON: {exc}") from None
        if not isinstance(state, dict) or state.get("format") not in (1, 2, CHECKPOINT_FORMAT):
            version = state.get("format") if isinstance(state, dict) else None
            raise CheckpointError(f"checkpoint format {version!r}; this build reads 1 to {CHECKPOINT_FORMAT}")
        try:
            ledger = cls(ZoneInfo(state["tz"]))
            ledger._horizon = state["horizon"]
            for scope, bp, *row in state["balances"]:  # format 1 rows have no ``corrected``
                ledger._totals[(scope, bp)] = _Totals(*row)
            for request_id, period, amounts, at, ttl_s, team, currency in state["holds"]:
                ledger._holds[request_id] = Hold(
                    request_id, period, MappingProxyType(amounts), parse_time(at), ttl_s, team, currency
                )
            ledger._closed = ClosedIds.from_state(state)
            ledger._soft = {(scope, bp) for scope, bp in state["soft"]}
            ledger._corrections = {period: set(ids) for period, ids in state.get("corrections", {}).items()}
        except (KeyError, TypeError, ValueError, CodecError, ZoneInfoNotFoundError) as exc:
            raise CheckpointError(f"checkpoint is malformed: {exc!r}") from None
        return ledger


def _still_needed(mark: tuple[str, str], totals: Mapping[tuple[str, str], _Totals], before_period: str) -> bool:
    """A run's threshold mark lives as long as its balance; a month's until the month is pruned."""
    return mark in totals if mark[1] == RUN_PERIOD else mark[1] >= before_period


def _hold_order(hold: Hold) -> tuple[datetime, str]:
    return hold.admitted_at, hold.request_id


_HANDLERS: dict[type[Event], Callable[[Ledger, Any], bool]] = {
    RequestAdmitted: Ledger._admit,
    RequestSettled: Ledger._settle,
    HoldExpired: Ledger._expire,
    BudgetThresholdCrossed: Ledger._threshold,
    RatingCorrected: Ledger._correct,
}
