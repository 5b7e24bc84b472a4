"""The projection timer (every ``projection_interval_s``): changed scopes' balances into Redis for the pods.

Each round writes the hash of every scope in ``WorkerState.dirty`` (its
current period's totals, limit and ``ledger.thresholds.budget_state``, as
``streams.projections.scope_fields`` lays them out) in one round trip. A
projection is a cache, never a source of truth: if Redis is down the scopes
stay dirty and are written again next round.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone

from ledger.periods import period_of
from ledger.thresholds import budget_state
from streams.projections import scope_fields
from streams.worker.state import Worker, WorkerState

log = logging.getLogger("farebox.worker")


async def project_once(w: Worker, state: WorkerState, now: datetime) -> None:
    if not state.dirty:
        return
    cfg = w.cfg
    period = period_of(now, cfg.tz)
    rows = {}
    for scope in list(state.dirty):
        ledger, limit = state.scope_state(scope, w.scope_ledger), cfg.limit_for(scope)
        rows[scope] = scope_fields(period, ledger.totals(period), limit,
                                   budget_state(ledger, period, limit, cfg.soft_pct_for(scope)))
    state.dirty.clear()
    try:
        await w.projections.scopes(rows)
    except Exception:  # Redis down: project again next round
        state.dirty.update(rows)
        log.warning("projection to Redis failed; retrying", exc_info=True)


def register(w: Worker, state: WorkerState) -> None:
    @w.app.timer(interval=w.cfg.projection_interval_s)
    async def project() -> None:
        await project_once(w, state, datetime.now(timezone.utc))
