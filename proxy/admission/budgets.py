"""Budget money, embedded mode: exact holds on the in-process ledger (the ``BudgetPort`` adapter).

``decide_hold`` is the pure decision: from the snapshot, the ask and the
ledger as it stands, the funding (with its threshold notices) or the
caller-facing refusal. ``LedgerBudgets.admit`` runs it without suspending;
the hold exists once the caller records ``request.admitted`` and the
recorder folds the appended event into the same ledger (events -> ledger,
one direction). Because decision and record share one event-loop turn, two
concurrent requests can never both take the last of a budget.

Settlement needs nothing from this adapter: the appended ``request.settled``
folds into the ledger and releases the hold. Refusals are 429
``budget_exhausted`` without Retry-After (waiting will not help).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone

from ledger.admission import AdmitDecision, decide_admit, threshold_events
from ledger.balances import Ledger
from pricing.money import format_money
from proxy.admission.budget_port import (
    BudgetAsk,
    Funding,
    ScopeState,
    budget_period,
    check_cost_cap,
    limits_for,
)
from proxy.errors import RateLimited
from proxy.snapshot import BudgetLimit, Snapshot


def decide_hold(ledger: Ledger, snapshot: Snapshot, ask: BudgetAsk, period: str) -> Funding:
    """Fund ``ask`` against the ledger as it stands, or raise the refusal. Pure: reads, never writes."""
    check_cost_cap(snapshot, ask)
    limits = limits_for(snapshot, ask.scopes)
    decision = decide_admit(ledger, scopes=ask.scopes, amount_micro=ask.hold_micro, limits=limits, period=period)
    if not decision.ok:
        raise _refusal(decision, limits, period, ask.hold_micro, snapshot.currency)
    notices = threshold_events(decision, limits=limits, period=period, request_id=ask.request_id,
                               currency=snapshot.currency, now=datetime.fromtimestamp(ask.now_s, timezone.utc))
    left = [v for v in decision.remaining.values() if v is not None]
    soft = bool(notices) or any(ledger.threshold_crossed(s, period) for s in ask.scopes
                                if snapshot.budgets.limit_for(s))
    return Funding({}, list(notices), min(left) if left else None, soft)


class LedgerBudgets:
    """``BudgetPort`` over the live in-process ledger, which only the recorder's fold writes."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    async def admit(self, snapshot: Snapshot, ask: BudgetAsk) -> Funding:
        return decide_hold(self.ledger, snapshot, ask, budget_period(snapshot, ask.now_s))

    def settle(self, request_id: str, charges: Mapping[str, int]) -> None:
        """Nothing to do: ``request.settled``, once appended, folds into the ledger."""

    def release(self, request_id: str) -> None:
        """Nothing to do: an admission the log refused was never folded, so nothing is held."""

    async def state(self, snapshot: Snapshot, scope: str, period: str | None, now_s: float) -> ScopeState | None:
        period = period or budget_period(snapshot, now_s)
        bal = self.ledger.balance(scope, period)
        return ScopeState(period, bal.settled, bal.held, bal.overrun, bal.requests,
                          self.ledger.threshold_crossed(scope, period))

    def downgrade_target(self, snapshot: Snapshot, scopes: Sequence[str], now_s: float) -> str | None:
        """The cheaper alias to serve instead, once a scope past its soft threshold asks for one."""
        period = budget_period(snapshot, now_s)
        for scope in scopes:
            limit = snapshot.budgets.limit_for(scope)
            if limit and limit.downgrade_alias and self.ledger.threshold_crossed(scope, period):
                return limit.downgrade_alias
        return None


def _refusal(decision: AdmitDecision, limits: dict[str, BudgetLimit], period: str, amount: int, ccy: str) -> RateLimited:
    scope = decision.short_scope or "?"
    limit = limits[scope]
    if decision.reason == "run_calls_exhausted":
        return RateLimited(
            f"Agent run {scope.removeprefix('run:')} has used all {limit.max_calls} calls it may make.",
            code="run_calls_exhausted",
        )
    left = max(decision.remaining.get(scope) or 0, 0)
    what = f"the {period} budget of {scope}" if not scope.startswith("run:") else f"the budget of {scope}"
    return RateLimited(
        f"{what[0].upper()}{what[1:]} has {format_money(left, ccy)} left of {format_money(limit.limit_micro or 0, ccy)}; "
        f"this request may cost up to {format_money(amount, ccy)}.",
        code="budget_exhausted",
    )
