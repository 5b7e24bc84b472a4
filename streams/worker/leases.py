"""One scope-ledger item applied: the fold, and the lease grant or budget notice it decides, sent at once.

The decisions are ``ledger.leases.fold`` (balances, leases, grants, the
source high-water marks that make a redelivered entry a no-op) and
``ledger.thresholds.decide_soft_notice``; this module only performs them.

Invariants:

* a grant goes to ``fb.scope-entries`` and to Redis (its key, and a publish
  to the pod that asked) within the batch, without waiting for Kafka's ack:
  if the worker dies before the batch's table write, the request is decided
  again from the same recovered state, which gives the same grant (same id,
  amount and expiry), so the pod's copy stays true;
* a notice (``budget.threshold_crossed``) is sent to the same topic before
  the table write that records the mark: a crash between them sends it again
  with the same id, never loses it; a notice read back only marks the state.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ledger.events import BudgetThresholdCrossed
from ledger.leases import ScopeEntry, fold
from ledger.thresholds import apply_notice, decide_soft_notice
from streams.worker.delivery import send_event
from streams.worker.state import Worker, WorkerState


async def apply_item(w: Worker, state: WorkerState, item: Any, sent: list[asyncio.Future]) -> bool:
    """Fold one entry or lease/budget event into its scope; a grant or notice is sent at once and its
    delivery future added to ``sent``. True when the scope's state changed."""
    cfg, scope = w.cfg, item.scope
    ledger = state.scope_state(scope, w.scope_ledger)
    limit = cfg.limit_for(scope)
    notice = granted = None
    if isinstance(item, BudgetThresholdCrossed):
        changed = apply_notice(ledger, item)
    else:
        changed, granted = fold(ledger, item, limit, cfg.tz, cfg.policy)
        if changed and isinstance(item, ScopeEntry):
            notice = decide_soft_notice(ledger, item, limit, cfg.soft_pct_for(scope), cfg.currency_for())
    if notice is not None:
        sent.append(await send_event(w.entries, scope, notice))
        state.stats.notices += 1
    if granted is not None:
        sent.append(await send_event(w.entries, scope, granted))
        await w.projections.grant(granted, cfg.policy.ttl_s + cfg.policy.expiry_grace_s)
        state.stats.grants += 1
    state.stats.entries += 1
    return changed
