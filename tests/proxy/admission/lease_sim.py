"""A budget scope's ledger processor behind a simulated network, for tests of the pod wallets.

The processor is the real pure fold (``ledger.leases.fold``) on a
``ScopeLedger``; only the transport is simulated: a lease request reaches it
after ``rtt/2`` and the grant comes back after another ``rtt/2``, and every
funded admission (and settlement) is folded as a scope entry, as the splitter
would, so the processor's balances are what the real one would see.
``project`` writes them into the wallets' ``ScopeStates`` as the worker's
Redis projection would.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

from ledger.events import Event, LeaseRequested, LeaseReturned
from ledger.leases import LeasePolicy, ScopeEntry, ScopeLedger, fold
from ledger.periods import period_of
from proxy.admission.scope_states import ScopeStates
from proxy.admission.wallet import WalletPolicy, Wallets

UTC = ZoneInfo("UTC")
SCOPE = "team:alpha"
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
PERIOD = period_of(NOW, UTC)


class Processor:
    """The scope ledger behind a simulated network: answers lease requests, sees admissions."""

    def __init__(self, limit: int, rtt_s: float = 0.01, policy: LeasePolicy | None = None, pods: int = 1) -> None:
        self.state = ScopeLedger(SCOPE)
        self.limit = limit
        self.rtt_s = rtt_s
        self.policy = policy or LeasePolicy(share=4, last_pct=5)
        self.requests: list[LeaseRequested] = []
        self.wallets: Wallets | None = None
        self.answer = True

    def emit(self, event: Event) -> None:
        if isinstance(event, LeaseRequested):
            self.requests.append(event)
            if self.answer:
                asyncio.get_running_loop().call_later(self.rtt_s / 2, self._decide, event)
        elif isinstance(event, LeaseReturned):  # same partition as the requests: delivered in order after them
            asyncio.get_running_loop().call_later(self.rtt_s / 2, fold, self.state, event, self.limit, UTC,
                                                  self.policy)

    def _decide(self, request: LeaseRequested) -> None:
        _, granted = fold(self.state, request, self.limit, UTC, self.policy)
        assert granted is not None and self.wallets is not None
        asyncio.get_running_loop().call_later(self.rtt_s / 2, self.wallets.on_grant, granted)

    def admitted(self, request_id: str, hold: int, leases: dict[str, str]) -> None:
        entry = ScopeEntry("admit", SCOPE, f"{request_id}/admitted", request_id, PERIOD, hold, 0,
                           leases.get(SCOPE), NOW)
        self.state.apply_entry(entry)

    def settled(self, request_id: str, hold: int, charge: int, leases: dict[str, str]) -> None:
        entry = ScopeEntry("close", SCOPE, f"{request_id}/settled", request_id, PERIOD, hold, charge,
                           leases.get(SCOPE), NOW)
        self.state.apply_entry(entry)

    def project(self, states: ScopeStates, now: float) -> None:
        """The worker's projection of the scope, read by the pod at ``now``."""
        t = self.state.totals(PERIOD)
        state = "hard" if t.spent >= self.limit else "ok"
        states.update({SCOPE: {"period": PERIOD, "state": state, "settled": str(t.settled), "held": str(t.held),
                               "leased": str(t.leased), "limit": str(self.limit)}}, now)


def wallets_for(processor: Processor, wait_s: float = 2.0, kafka_up=lambda: True, states: ScopeStates | None = None,
                **policy) -> Wallets:  # type: ignore[no-untyped-def]
    wallets = Wallets("pod-a", processor.emit, lambda: NOW, WalletPolicy(lease_wait_s=wait_s, **policy),
                      kafka_up=kafka_up, states=states or ScopeStates())
    processor.wallets = wallets
    return wallets


