"""The sweeper timer (every ``sweep_interval_s``): expired holds and leases become events.

* Hold expiries: an open request past its TTL, in an ``fb.requests``
  partition the splitter has handled to its end
  (``streams.worker.split.handled_to_end``; behind it the settlement may still
  be unread), gets ``hold.expired`` on ``fb.requests`` (decided by
  ``ledger.splitting.decide_hold_expiries``; the splitter then closes it).
* Lease expiries: a lease past its expiry gets ``lease.expired`` on
  ``fb.scope-entries`` (``ledger.leases.decide_lease_expiries``; the scope
  ledger folds it).
* Closed leases older than the TTL plus twice the grace are forgotten from
  the live states; the table value follows at the scope's next write.

Event ids are deterministic, so an expiry sent twice (a sweep before the
first one was folded) is one event to every consumer.
"""

from __future__ import annotations

from datetime import datetime, timezone

from ledger.leases import decide_lease_expiries
from ledger.splitting import decide_hold_expiries
from streams.worker.delivery import send_event
from streams.worker.split import handled_to_end
from streams.worker.state import Worker, WorkerState


async def sweep_once(w: Worker, state: WorkerState, now: datetime) -> None:
    for expired in decide_hold_expiries(list(state.open_requests.items()), now, handled_to_end(w, state)):
        await send_event(w.requests, expired.team, expired)
    policy = w.cfg.policy
    keep_s = policy.ttl_s + 2 * policy.expiry_grace_s
    for ledger in list(state.live.values()):
        for lease_expired in decide_lease_expiries(ledger, now, policy):
            await send_event(w.entries, ledger.scope, lease_expired)
        ledger.forget_closed(now, keep_s)


def register(w: Worker, state: WorkerState) -> None:
    @w.app.timer(interval=w.cfg.sweep_interval_s)
    async def sweep() -> None:
        await sweep_once(w, state, datetime.now(timezone.utc))
