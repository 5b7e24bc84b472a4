"""Expiring holds nobody settled (a pod died mid-request): charged in full; and,
when the month turns, pruning what the live ledger no longer needs (embedded mode).

The decision is pure (``ledger.admission.decide_expiries``); this loop only
asks it every ``interval_s`` and records the ``hold.expired`` events, which
the recorder appends and then folds into the ledger like any other. A hold
whose request does settle later stays charged in full: the settlement finds
the hold closed and changes nothing (the conservative choice, recorded,
never hidden).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime, timezone

from ledger.admission import decide_expiries
from ledger.balances import Ledger
from ledger.events import Event
from proxy.observe.metrics import Metrics

log = logging.getLogger("farebox.sweeper")


def sweep_once(ledger: Ledger, emit: Callable[[Event], object], metrics: Metrics, now_s: float) -> int:
    """Expire what is due at ``now_s``; returns how many holds expired."""
    now = datetime.fromtimestamp(now_s, timezone.utc)
    expired = decide_expiries(ledger, now)
    for event in expired:
        emit(event)
    if expired:
        metrics.holds_expired.inc(len(expired))
        log.warning("expired %d unsettled hold(s), charged in full", len(expired))
    if ledger.prune_for(now):  # the month turned: forget what is two months old
        log.info("ledger pruned before %s", ledger.horizon)
    return len(expired)


async def sweep_forever(ledger: Ledger, emit: Callable[[Event], object], metrics: Metrics,
                        clock: Callable[[], float], interval_s: float = 5.0) -> None:
    while True:
        await asyncio.sleep(interval_s)
        try:
            sweep_once(ledger, emit, metrics, clock())
        except Exception:
            log.exception("hold sweeper failed; retrying")
