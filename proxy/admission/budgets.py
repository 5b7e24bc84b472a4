"""Money at admission, embedded mode: exact holds against the in-process ledger.

``BudgetGate.admit`` decides with ``ledger.decide_admit`` and returns the
events to record; the caller must record them (``Runtime.emit`` applies them
to the ledger) before its next ``await`` — that is what makes the check and
the hold one atomic step on the event loop. Refusals are 429
``budget_exhausted`` without Retry-After (waiting will not help).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from ledger.admission import AdmitDecision, decide_admit, exceeds_cost_cap, threshold_events
from ledger.balances import Ledger
from ledger.events import BudgetThresholdCrossed
from ledger.periods import period_of
from pricing.money import format_money
from proxy.errors import InvalidRequest, RateLimited
from proxy.snapshot import BudgetLimit, Snapshot


@dataclass(frozen=True, slots=True)
class BudgetVerdict:
    period: str
    decision: AdmitDecision
    notices: list[BudgetThresholdCrossed]

    def remaining_micro(self) -> int | None:
        """The tightest remaining budget across limited scopes after this hold (None: unlimited)."""
        left = [v for v in self.decision.remaining.values() if v is not None]
        return min(left) if left else None


def limits_for(snapshot: Snapshot, scopes: list[str]) -> dict[str, BudgetLimit]:
    out = {}
    for scope in scopes:
        limit = snapshot.budgets.limit_for(scope)
        if limit is not None and (limit.limit_micro is not None or limit.max_calls is not None):
            out[scope] = limit
    return out


class BudgetGate:
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self._zones: dict[str, ZoneInfo] = {}

    def zone(self, name: str) -> ZoneInfo:
        if name not in self._zones:
            self._zones[name] = ZoneInfo(name)
        return self._zones[name]

    def admit(
        self, snapshot: Snapshot, *, request_id: str, scopes: list[str], amount_micro: int, now: datetime,
        est_input: int, max_output: int,
    ) -> BudgetVerdict:
        """Decide; raises the caller-facing error on refusal. Nothing is held until the events are recorded."""
        self.check_cap(snapshot, amount_micro, est_input, max_output)
        ccy = snapshot.currency
        period = period_of(now, self.zone(snapshot.budgets.timezone))
        limits = limits_for(snapshot, scopes)
        decision = decide_admit(self.ledger, scopes=scopes, amount_micro=amount_micro, limits=limits, period=period)
        if not decision.ok:
            raise _refusal(decision, limits, period, amount_micro, ccy)
        notices = threshold_events(
            decision, limits=limits, period=period, request_id=request_id, currency=ccy, now=now
        )
        return BudgetVerdict(period, decision, notices)

    @staticmethod
    def check_cap(snapshot: Snapshot, amount_micro: int, est_input: int, max_output: int) -> None:
        """The per-request cap (denial of wallet): a 400 naming max_completion_tokens."""
        cap = snapshot.budgets.per_request_cap_micro
        ccy = snapshot.currency
        if exceeds_cost_cap(amount_micro, cap):
            assert cap is not None
            raise InvalidRequest(
                f"This request may cost up to {format_money(amount_micro, ccy)} ({est_input:,} input + "
                f"{max_output:,} max output tokens), above the per-request cap of {format_money(cap, ccy)}. "
                "Lower max_completion_tokens or shorten the prompt.",
                code="request_cost_cap_exceeded",
                param="max_completion_tokens",
            )

    def downgrade_for(self, snapshot: Snapshot, scopes: list[str], now: datetime) -> str | None:
        """The cheaper alias to serve instead, once a scope past its soft threshold asks for one."""
        period = period_of(now, self.zone(snapshot.budgets.timezone))
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
