"""Expiring holds nobody settled (a pod died mid-request): charged in full; and,
when the month turns, pruning what the live ledger no longer needs.

The decision is pure (``ledger.admission.decide_expiries``); this loop only
asks it every ``interval_s`` and records the ``hold.expired`` events, which
the ledger applies like any other. A hold whose request does settle later
stays charged in full: the settlement finds the hold closed and changes
nothing (the conservative choice, recorded, never hidden).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timezone

from ledger.admission import decide_expiries
from proxy.runtime import Runtime

log = logging.getLogger("farebox.sweeper")


def sweep_once(rt: Runtime) -> int:
    """Expire what is due now; returns how many holds expired."""
    if rt.budgets is None:
        return 0
    now = datetime.fromtimestamp(rt.clock(), timezone.utc)
    expired = decide_expiries(rt.budgets.ledger, now)
    for event in expired:
        rt.emit(event)
    if expired:
        rt.metrics.holds_expired.inc(len(expired))
        log.warning("expired %d unsettled hold(s), charged in full", len(expired))
    if rt.budgets.ledger.prune_for(now):  # the month turned: forget what is two months old
        log.info("ledger pruned before %s", rt.budgets.ledger.horizon)
    return len(expired)


async def sweep_forever(rt: Runtime, interval_s: float = 5.0) -> None:
    while True:
        await asyncio.sleep(interval_s)
        try:
            sweep_once(rt)
        except Exception:
            log.exception("hold sweeper failed; retrying")
