"""Budget thresholds in distributed mode: the soft-threshold notice and a scope's ok/soft/hard state.

Embedded mode emits ``BudgetThresholdCrossed`` once per scope and budget
period, when an admission takes settled + held to or past ``soft_pct`` of the
limit (``ledger.admission``). In distributed mode the ledger processor, the
single writer of each scope, decides the same notice: after every request
entry it folds (``decide_soft_notice``), because that is where settled + held
moves. The amount compared is settled + held as in embedded mode, not the
leased-unspent money: a lease is budget committed to a pod, not yet spent,
and counting it would send the notice up to pods × slice early.

Exactly once: the decision marks the period in the ``ScopeLedger``
(``soft_crossed``, kept in the table value with the balances it was decided
on), so a restart recovers the mark with the balances, a re-delivered entry
is skipped by the scope's high-water offset, and a notice that comes back
through ``fb.scope-entries`` (where it is routed, keyed by scope) only marks
what is already marked (``apply_notice``). The id is ``{scope}/{period}/soft``
in both modes, so consumers dedupe the one redelivery a crash between
sending and recording can cause.

There is no hard-threshold event, in either mode: a refusal at the hard limit
is a 429 (or a grant of 0), not an event. ``budget_state`` is what the Redis
projection carries for the pods: ``hard`` when settled + held + leased has
reached the limit (nothing more can be granted), ``soft`` once the period's
notice was decided (sticky for the month, like embedded
``Ledger.threshold_crossed``) or settled + held is past the threshold, else
``ok``. Pure: no clock, no I/O.
"""

from __future__ import annotations

from ledger.events import BudgetThresholdCrossed
from ledger.leases import ScopeEntry, ScopeLedger
from ledger.periods import balance_period


def _past_soft(spent: int, limit_micro: int, soft_pct: int) -> bool:
    return spent > 0 and spent * 100 >= limit_micro * soft_pct


def decide_soft_notice(state: ScopeLedger, entry: ScopeEntry, limit_micro: int | None, soft_pct: int,
                       currency: str) -> BudgetThresholdCrossed | None:
    """The notice ``entry`` (just folded into ``state``) triggers, marking its period; None if none is due."""
    if limit_micro is None:
        return None
    totals = state.periods.get(balance_period(state.scope, entry.period))
    if totals is None or not _past_soft(totals.settled + totals.held, limit_micro, soft_pct):
        return None
    if not state.mark_soft(entry.period):
        return None
    return BudgetThresholdCrossed(time=entry.time, request_id=entry.request_id, scope=state.scope,
                                  period=entry.period, limit_micro=limit_micro,
                                  spent_micro=totals.settled + totals.held, threshold_pct=soft_pct, currency=currency)


def apply_notice(state: ScopeLedger, notice: BudgetThresholdCrossed) -> bool:
    """Fold a notice read back from the topic: marks its period; False when it already was."""
    return notice.scope == state.scope and state.mark_soft(notice.period)


def budget_state(state: ScopeLedger, period: str, limit_micro: int | None, soft_pct: int) -> str:
    """``ok`` | ``soft`` | ``hard`` for the scope in ``period`` (see the module docstring)."""
    if limit_micro is None:
        return "ok"
    key = balance_period(state.scope, period)
    totals = state.periods.get(key)
    if (totals.spent if totals is not None else 0) >= limit_micro:
        return "hard"
    if key in state.soft_crossed or (totals is not None and _past_soft(totals.settled + totals.held, limit_micro,
                                                                        soft_pct)):
        return "soft"
    return "ok"
