"""Budget money, distributed mode: holds funded from this pod's leases (the ``BudgetPort`` adapter).

The money itself lives in ``Wallets`` (``wallet.py``: leases per scope, asks
and grants); the soft/hard readings come from the worker's projection
(``ScopeStates``). This adapter only speaks the port: it checks the
per-request cap, funds the limited scopes, and answers the soft state and
downgrade from the projection. The ledger processor, not this pod, keeps the
balances: ``state`` reads the worker's projection of the scope
(``read_scope``, wired to Redis by ``farebox.distributed``), which holds the
current period only.

``Wallets.admit`` returns synchronously after its last ``await``; so does
``admit`` here, keeping funding and ``request.admitted`` one step.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

from proxy.admission.budget_port import BudgetAsk, Funding, ScopeState, budget_period, check_cost_cap, limits_for
from proxy.admission.wallet import Wallets
from proxy.errors import GatewayError, InvalidRequest
from proxy.snapshot import Snapshot

log = logging.getLogger("farebox")

ReadScope = Callable[[str], Awaitable[Mapping[str, str]]]
"""A scope's projection hash as the worker wrote it (empty: never projected)."""


class LeaseBudgets:
    """``BudgetPort`` over a pod's lease wallets; balances read from the worker's projection."""

    def __init__(self, wallets: Wallets, hold_ttl_s: int, read_scope: ReadScope | None = None) -> None:
        self.wallets = wallets
        self.hold_ttl_s = hold_ttl_s
        self.read_scope = read_scope

    async def admit(self, snapshot: Snapshot, ask: BudgetAsk) -> Funding:
        check_cost_cap(snapshot, ask)
        limited = [s for s, lim in limits_for(snapshot, ask.scopes).items() if lim.limit_micro is not None]
        period = budget_period(snapshot, ask.now_s)
        leases = await self.wallets.admit(ask.request_id, limited, ask.hold_micro, ask.hold_ttl_s or self.hold_ttl_s,
                                          period, ask.max_wait_s)
        soft = self.wallets.states.any_past_soft(snapshot, limited, period, asyncio.get_running_loop().time())
        return Funding(leases, [], None, soft)

    def settle(self, request_id: str, charges: Mapping[str, int]) -> None:
        self.wallets.settle(request_id, charges)

    def release(self, request_id: str) -> None:
        self.wallets.settle(request_id, {})  # charged nothing: the whole hold goes back to its leases

    def handed_over(self, request_id: str) -> None:
        """The hold stays funded from its leases: the ledger holds it as the other requests' (a batch's lines),
        which settle it wherever they run; this pod never re-spends it."""

    async def state(self, snapshot: Snapshot, scope: str, period: str | None, now_s: float) -> ScopeState | None:
        if self.read_scope is None:
            return None
        current = budget_period(snapshot, now_s)
        if period is not None and period != current:
            raise InvalidRequest(f"This pod reads budgets from the worker's projection, which holds the current period "
                                 f"({current}) only; ask `farebox report showback --month {period}` for another.",
                                 param="period")
        try:
            row = await self.read_scope(scope)
        except Exception:  # noqa: BLE001 - the projection's store is away: say so, never a traceback
            log.warning("cannot read the budget projection of %s", scope, exc_info=True)
            raise GatewayError("The budget projection cannot be read right now; retry shortly.", status=503,
                               code="budget_unavailable", headers={"Retry-After": "1"}) from None
        return projected_state(row, current)

    def downgrade_target(self, snapshot: Snapshot, scopes: Sequence[str], now_s: float) -> str | None:
        """The worker's projection says which scopes are past soft."""
        return self.wallets.states.downgrade_for(snapshot, list(scopes), budget_period(snapshot, now_s),
                                                 asyncio.get_running_loop().time())


def projected_state(row: Mapping[str, str], period: str) -> ScopeState:
    """A scope's projection hash as a ``ScopeState`` of ``period``; nothing projected for it yet (no row, or a
    row of the period before: the month turned and no entry of this one arrived) is a zero balance."""
    if row.get("period") != period:
        return ScopeState(period, 0, 0, 0, 0, False)

    def micro(name: str) -> int:
        return int(row.get(name) or 0)

    return ScopeState(period, micro("settled"), micro("held"), micro("overrun"), micro("requests"),
                      row.get("state") in ("soft", "hard"), leased=micro("leased"))
