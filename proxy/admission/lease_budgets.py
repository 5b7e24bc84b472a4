"""Budget money, distributed mode: holds funded from this pod's leases (the ``BudgetPort`` adapter).

The money itself lives in ``Wallets`` (``wallet.py``: leases per scope, asks
and grants); the soft/hard readings come from the worker's projection
(``ScopeStates``). This adapter only speaks the port: it checks the
per-request cap, funds the limited scopes, and answers the soft state and
downgrade from the projection. The ledger processor, not this pod, keeps the
balances, so ``state`` has none to give (the admin API answers 501 here).

``Wallets.admit`` returns synchronously after its last ``await``; so does
``admit`` here, keeping funding and ``request.admitted`` one step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from proxy.admission.budget_port import BudgetAsk, Funding, ScopeState, budget_period, check_cost_cap, limits_for
from proxy.admission.wallet import Wallets
from proxy.snapshot import Snapshot


class LeaseBudgets:
    """``BudgetPort`` over a pod's lease wallets."""

    def __init__(self, wallets: Wallets, hold_ttl_s: int) -> None:
        self.wallets = wallets
        self.hold_ttl_s = hold_ttl_s

    async def admit(self, snapshot: Snapshot, ask: BudgetAsk) -> Funding:
        check_cost_cap(snapshot, ask)
        limited = [s for s, lim in limits_for(snapshot, ask.scopes).items() if lim.limit_micro is not None]
        period = budget_period(snapshot, ask.now_s)
        leases = await self.wallets.admit(ask.request_id, limited, ask.hold_micro, self.hold_ttl_s, period)
        soft = self.wallets.states.any_past_soft(snapshot, limited, period, asyncio.get_running_loop().time())
        return Funding(leases, [], None, soft)

    def settle(self, request_id: str, charges: Mapping[str, int]) -> None:
        self.wallets.settle(request_id, charges)

    def release(self, request_id: str) -> None:
        self.wallets.settle(request_id, {})  # charged nothing: the whole hold goes back to its leases

    def state(self, snapshot: Snapshot, scope: str, period: str | None, now_s: float) -> ScopeState | None:
        return None

    def downgrade_target(self, snapshot: Snapshot, scopes: Sequence[str], now_s: float) -> str | None:
        """The worker's projection says which scopes are past soft."""
        return self.wallets.states.downgrade_for(snapshot, list(scopes), budget_period(snapshot, now_s),
                                                 asyncio.get_running_loop().time())
