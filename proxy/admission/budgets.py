"""Budget money, embedded mode: exact holds on the in-process ledger (the ``BudgetPort`` adapter).

``decide_hold`` is the pure decision: from the snapshot, the ask, the ledger
as it stands and the unbacked exposure of the requests in flight, the
funding (its hold right-sized by ``ledger.hold_sizing``, with its threshold
notices), ``Reserved`` (the money is held by requests in flight), or the
caller-facing refusal. ``LedgerBudgets.admit`` runs it without suspending
after its last ``await``; the hold exists once the caller records
``request.admitted`` and the recorder folds the appended event into the
same ledger through ``LedgerBudgets.fold`` (events -> ledger, one
direction). Because decision and record share one event-loop turn, two
concurrent requests can never both take the last of a budget.

Refusals: 429 ``budget_exhausted`` (final, no Retry-After) when settled
spend leaves less than the request's estimate; when holds in flight fill
the budget the request waits in the scope's FIFO queue
(``admission_queue``), woken by every settlement and expiry the fold sees,
and after ``ask.max_wait_s`` gets 429 ``budget_reserved`` with a Retry-After
from when the holds in flight are expected to settle.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from ledger.admission import AdmitDecision, decide_admit, threshold_events
from ledger.balances import Ledger
from ledger.events import Event, HoldExpired, RequestSettled
from ledger.hold_sizing import ScopeRoom, Sizing, capped_last_hold, size_hold
from pricing.money import format_money
from proxy.admission.admission_queue import AdmissionQueue, Flights
from proxy.admission.budget_port import (
    BudgetAsk,
    Funding,
    ScopeState,
    budget_period,
    check_cost_cap,
    limits_for,
)
from proxy.errors import BudgetRefused
from proxy.snapshot import BudgetLimit, Snapshot


@dataclass(frozen=True, slots=True)
class Reserved:
    """Not now: holds in flight cover the money ``scope`` has left."""

    scope: str


class Exposure:
    """Per scope, and per scope and key, the sum of (worst case - hold) over requests in flight."""

    def __init__(self) -> None:
        self.scope: dict[str, int] = {}
        self.key: dict[tuple[str, str], int] = {}
        self._open: dict[str, tuple[str, int, tuple[str, ...]]] = {}

    def add(self, request_id: str, key_id: str, extra: int, scopes: Sequence[str]) -> None:
        if extra <= 0 or request_id in self._open:
            return
        self._open[request_id] = (key_id, extra, tuple(scopes))
        for scope in scopes:
            self.scope[scope] = self.scope.get(scope, 0) + extra
            self.key[(scope, key_id)] = self.key.get((scope, key_id), 0) + extra

    def remove(self, request_id: str) -> None:
        entry = self._open.pop(request_id, None)
        if entry is None:
            return
        key_id, extra, scopes = entry
        for scope in scopes:
            _lower(self.scope, scope, extra)
            _lower(self.key, (scope, key_id), extra)


def _lower(totals: dict, name: object, amount: int) -> None:
    left = totals.get(name, 0) - amount
    if left > 0:
        totals[name] = left
    else:
        totals.pop(name, None)


def decide_hold(ledger: Ledger, snapshot: Snapshot, ask: BudgetAsk, period: str,
                exposure: Exposure | None = None, sizing: Sizing = Sizing()) -> Funding | Reserved:
    """Fund ``ask`` against the ledger as it stands, say it must wait, or raise. Pure: reads, never writes."""
    check_cost_cap(snapshot, ask)
    limits = limits_for(snapshot, ask.scopes)
    worst = ask.hold_micro
    learned = worst if ask.learned_micro is None else min(ask.learned_micro, worst)
    rooms = _rooms(ledger, limits, period, ask.key_id, exposure or Exposure())
    amount = size_hold(worst, learned, rooms, sizing)
    decision = decide_admit(ledger, scopes=ask.scopes, amount_micro=amount, limits=limits, period=period,
                            estimate_micro=learned)
    if decision.reason == "budget_reserved":
        capped = capped_last_hold(worst, learned, rooms, sizing)
        if capped is not None:
            amount = capped
            decision = decide_admit(ledger, scopes=ask.scopes, amount_micro=amount, limits=limits, period=period,
                                    estimate_micro=learned)
    if decision.reason == "budget_reserved":
        assert decision.short_scope is not None
        return Reserved(decision.short_scope)
    if not decision.ok:
        raise _refusal(decision, limits, period, learned, snapshot.currency)
    notices = threshold_events(decision, limits=limits, period=period, request_id=ask.request_id,
                               currency=snapshot.currency, now=datetime.fromtimestamp(ask.now_s, timezone.utc))
    left = [v for v in decision.remaining.values() if v is not None]
    soft = bool(notices) or any(ledger.threshold_crossed(s, period) for s in ask.scopes
                                if snapshot.budgets.limit_for(s))
    return Funding({}, list(notices), min(left) if left else None, soft, amount)


def _rooms(ledger: Ledger, limits: Mapping[str, BudgetLimit], period: str, key_id: str,
           exposure: Exposure) -> dict[str, ScopeRoom]:
    rooms = {}
    for scope, limit in limits.items():
        if limit.limit_micro is None:
            continue
        bal = ledger.balance(scope, period)
        rooms[scope] = ScopeRoom(limit.limit_micro, bal.settled, bal.held, exposure.scope.get(scope, 0),
                                 exposure.key.get((scope, key_id), 0))
    return rooms


class LedgerBudgets:
    """``BudgetPort`` over the live in-process ledger, which only ``fold`` (the recorder's) writes."""

    def __init__(self, ledger: Ledger, sizing: Sizing = Sizing()) -> None:
        self.ledger = ledger
        self.sizing = sizing
        self.queue = AdmissionQueue()
        self.flights = Flights()
        self.exposure = Exposure()

    def fold(self, event: Event) -> bool:
        """The recorder's fold: apply to the ledger; a closed hold frees money, so wake the queue heads."""
        changed = self.ledger.apply(event)
        if isinstance(event, (RequestSettled, HoldExpired)):
            self._closed(event.request_id, event.time.timestamp())
            self.queue.wake()
        return changed

    async def admit(self, snapshot: Snapshot, ask: BudgetAsk) -> Funding:
        period = budget_period(snapshot, ask.now_s)
        money = [s for s, lim in limits_for(snapshot, ask.scopes).items() if lim.limit_micro is not None]
        if not self.queue.ahead(money):
            outcome = self._decide(snapshot, ask, period, ask.now_s)
            if isinstance(outcome, Funding):
                return outcome
        return await self._wait(snapshot, ask, period, money)

    async def _wait(self, snapshot: Snapshot, ask: BudgetAsk, period: str, money: list[str]) -> Funding:
        """Queue behind earlier waiters; re-decide at the head of every queue, until funded or the deadline."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + ask.max_wait_s
        waiter = self.queue.join(money)
        try:
            while True:
                outcome: Funding | Reserved | None = None
                if self.queue.is_head(waiter):
                    outcome = self._decide(snapshot, ask, period, ask.now_s + loop.time() - started)
                    if isinstance(outcome, Funding):
                        return outcome
                left = deadline - loop.time()
                if left <= 0:
                    scope = outcome.scope if outcome is not None else money[0]
                    raise self._reserved(snapshot, scope, period, ask)
                waiter.woken.clear()
                try:
                    await asyncio.wait_for(waiter.woken.wait(), left)
                except TimeoutError:
                    pass
        finally:
            self.queue.leave(waiter)

    def _decide(self, snapshot: Snapshot, ask: BudgetAsk, period: str, now_s: float) -> Funding | Reserved:
        outcome = decide_hold(self.ledger, snapshot, ask, period, self.exposure, self.sizing)
        if isinstance(outcome, Funding):
            held = ask.hold_micro if outcome.hold_micro is None else outcome.hold_micro
            self.exposure.add(ask.request_id, ask.key_id, ask.hold_micro - held, ask.scopes)
            self.flights.admitted(ask.request_id, ask.scopes, now_s)
        return outcome

    def _reserved(self, snapshot: Snapshot, scope: str, period: str, ask: BudgetAsk) -> BudgetRefused:
        bal = self.ledger.balance(scope, period)
        retry = self.flights.retry_after_s(scope, ask.now_s + ask.max_wait_s)
        ccy = snapshot.currency
        return BudgetRefused(
            f"The {period} budget of {scope} is held by requests in flight ({format_money(bal.held, ccy)} held, "
            f"{format_money(bal.settled, ccy)} settled); this request waited {ask.max_wait_s:g} s. "
            f"Retry in about {retry} s.",
            code="budget_reserved", scope=scope, retry_after_s=retry)

    def _closed(self, request_id: str, at_s: float | None) -> None:
        self.exposure.remove(request_id)
        self.flights.closed(request_id, at_s)

    def settle(self, request_id: str, charges: Mapping[str, int]) -> None:
        """The money moves when ``request.settled`` folds (``fold``); here only the in-flight books."""
        self._closed(request_id, None)

    def handed_over(self, request_id: str) -> None:
        """The hold was recorded under other request ids (a batch's lines): forget this id's books."""
        self._closed(request_id, None)

    def release(self, request_id: str) -> None:
        """An admission the log refused was never folded, so nothing is held; forget its books."""
        self._closed(request_id, None)
        self.queue.wake()

    async def state(self, snapshot: Snapshot, scope: str, period: str | None, now_s: float) -> ScopeState | None:
        period = period or budget_period(snapshot, now_s)
        bal = self.ledger.balance(scope, period)
        return ScopeState(period, bal.settled, bal.held, bal.overrun, bal.requests,
                          self.ledger.threshold_crossed(scope, period))

    def usage(self, snapshot: Snapshot, now_s: float) -> list[tuple[str, int, int, int]]:
        """(scope, settled + held, limit, soft %) this month of each limited team and business unit, for /metrics
        (key and run scopes are left out: their ids are not a bounded label set)."""
        period = budget_period(snapshot, now_s)
        return [(scope, self.ledger.balance(scope, period).spent, lim.limit_micro, lim.soft_pct)
                for scope, lim in snapshot.budgets.scopes.items()
                if lim.limit_micro is not None and scope.startswith(("team:", "bu:"))]

    def downgrade_target(self, snapshot: Snapshot, scopes: Sequence[str], now_s: float) -> str | None:
        """The cheaper alias to serve instead, once a scope past its soft threshold asks for one."""
        period = budget_period(snapshot, now_s)
        for scope in scopes:
            limit = snapshot.budgets.limit_for(scope)
            if limit and limit.downgrade_alias and self.ledger.threshold_crossed(scope, period):
                return limit.downgrade_alias
        return None


def _refusal(decision: AdmitDecision, limits: Mapping[str, BudgetLimit], period: str, amount: int,
             ccy: str) -> BudgetRefused:
    scope = decision.short_scope or "?"
    limit = limits[scope]
    if decision.reason == "run_calls_exhausted":
        return BudgetRefused(
            f"Agent run {scope.removeprefix('run:')} has used all {limit.max_calls} calls it may make.",
            code="run_calls_exhausted", scope=scope,
        )
    left = max(decision.remaining.get(scope) or 0, 0)
    what = f"the {period} budget of {scope}" if not scope.startswith("run:") else f"the budget of {scope}"
    return BudgetRefused(
        f"{what[0].upper()}{what[1:]} has {format_money(left, ccy)} left of {format_money(limit.limit_micro or 0, ccy)}; "
        f"this request is estimated at {format_money(amount, ccy)}.",
        code="budget_exhausted", scope=scope,
    )
