"""Budget decisions: pure functions of the ledger, the limits and what is asked.

They decide and return; the caller turns a decision into events, applies them
to the ledger and appends them to the log. In embedded mode the caller must
apply ``RequestAdmitted`` (and any ``BudgetThresholdCrossed``) to the ledger in
the same event-loop turn as ``decide_admit``, with no ``await`` between, so
two concurrent requests cannot both take the last of a budget.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol

from ledger.balances import Ledger
from ledger.events import BudgetThresholdCrossed, HoldExpired

Refusal = Literal["budget_exhausted", "budget_reserved", "run_calls_exhausted"]
"""``budget_exhausted``: settled spend leaves less than the request's estimate (waiting cannot help);
``budget_reserved``: the money is there but holds of requests in flight cover it (waiting can)."""


class Limit(Protocol):
    """What a decision needs of a scope's limit (``ScopeLimit`` or the config's ``BudgetLimit``)."""

    @property
    def limit_micro(self) -> int | None: ...
    @property
    def soft_pct(self) -> int: ...
    @property
    def max_calls(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class ScopeLimit:
    """A scope's hard limit (None: unlimited), soft threshold in percent, and call cap (agent runs)."""

    limit_micro: int | None
    soft_pct: int = 80
    max_calls: int | None = None


@dataclass(frozen=True, slots=True)
class AdmitDecision:
    """``remaining`` is per scope after this hold when ok, before it when refused; None = unlimited."""

    ok: bool
    short_scope: str | None = None
    reason: Refusal | None = None
    remaining: dict[str, int | None] = field(default_factory=dict)
    soft_crossed: list[str] = field(default_factory=list)


def decide_admit(
    ledger: Ledger,
    *,
    scopes: Sequence[str],
    amount_micro: int,
    limits: Mapping[str, Limit],
    period: str,
    estimate_micro: int | None = None,
) -> AdmitDecision:
    """All-or-nothing: ok only if every limited scope can hold ``amount_micro`` (and has calls left).

    A scope short of money is ``budget_exhausted`` when ``limit - settled``
    (settled counts every recorded overrun) is below ``estimate_micro``, the
    request's cost at its estimate, else ``budget_reserved`` (in-flight holds
    fill it). Without ``estimate_micro`` every money shortfall is
    ``budget_exhausted``. The refusal names the first short scope in
    ``scopes`` order, an exhausted one before a reserved one. ``soft_crossed`` lists
    scopes this hold takes to or past ``soft_pct`` of their limit that have not
    had their ``BudgetThresholdCrossed`` for ``period`` yet.
    """
    if isinstance(amount_micro, bool) or not isinstance(amount_micro, int) or amount_micro < 0:
        raise ValueError(f"amount_micro must be a non-negative int, got {amount_micro!r}")
    scopes = list(dict.fromkeys(scopes))
    before: dict[str, int | None] = {}
    short: tuple[str, Refusal] | None = None
    reserved: str | None = None
    for scope in scopes:
        limit = limits.get(scope)
        if limit is None:
            before[scope] = None
            continue
        calls_cap = limit.max_calls
        if short is None and calls_cap is not None and ledger.balance(scope, period).requests >= calls_cap:
            short = (scope, "run_calls_exhausted")
        if limit.limit_micro is None:
            before[scope] = None
            continue
        available = ledger.available(scope, period, limit.limit_micro)
        before[scope] = available
        if short is None and available < amount_micro:
            unspent = limit.limit_micro - ledger.balance(scope, period).settled
            if estimate_micro is None or unspent < estimate_micro:
                short = (scope, "budget_exhausted")
            elif reserved is None:
                reserved = scope
    if short is None and reserved is not None:
        short = (reserved, "budget_reserved")
    if short is not None:
        return AdmitDecision(ok=False, short_scope=short[0], reason=short[1], remaining=before)

    remaining = {scope: None if left is None else left - amount_micro for scope, left in before.items()}
    crossed = []
    for scope in scopes:
        limit = limits.get(scope)
        if limit is None or limit.limit_micro is None or ledger.threshold_crossed(scope, period):
            continue
        spent_after = limit.limit_micro - remaining[scope]  # type: ignore[operator]
        if spent_after > 0 and spent_after * 100 >= limit.limit_micro * limit.soft_pct:
            crossed.append(scope)
    return AdmitDecision(ok=True, remaining=remaining, soft_crossed=crossed)


def threshold_events(
    decision: AdmitDecision,
    *,
    limits: Mapping[str, Limit],
    period: str,
    request_id: str,
    currency: str,
    now: datetime,
) -> list[BudgetThresholdCrossed]:
    """The notices for ``decision.soft_crossed`` (spent = settled + held including this hold)."""
    events = []
    for scope in decision.soft_crossed:
        limit = limits[scope]
        assert limit.limit_micro is not None  # only limited scopes cross
        events.append(
            BudgetThresholdCrossed(
                time=now,
                request_id=request_id,
                scope=scope,
                period=period,
                limit_micro=limit.limit_micro,
                spent_micro=limit.limit_micro - (decision.remaining[scope] or 0),
                threshold_pct=limit.soft_pct,
                currency=currency,
            )
        )
    return events


def decide_expiries(ledger: Ledger, now: datetime) -> list[HoldExpired]:
    """The sweeper's decision: every hold past its TTL at ``now`` is charged in full."""
    return [
        HoldExpired(time=now, request_id=hold.request_id, team=hold.team, charged=dict(hold.amounts), currency=hold.currency)
        for hold in ledger.expired_holds(now)
    ]


def exceeds_cost_cap(amount_micro: int, cap_micro: int | None) -> bool:
    """Whether a request's worst case is over the per-request cap (denial of wallet); None = no cap."""
    return cap_micro is not None and amount_micro > cap_micro
