"""Money at admission, distributed mode: a wallet of leases per budget scope.

A pod spends slices of each scope's budget that the ledger processor
granted (``ledger.leases``). ``Wallets.admit`` funds a request's hold on
every limited scope from a lease that covers it — no network round trip —
or, when a scope's leases are short, asks for one (``lease.requested`` on
the event log), waits up to ``lease_wait_s`` for the grant (Redis publish,
``on_grant``) and tries again. Funding happens in one synchronous step after
the last ``await``, so the caller records ``request.admitted`` before any
other request can take the same money.

* Top-up: after funding, a scope whose current lease fell below
  ``low_water_pct`` of its grant asks for the next one in the background.
* Returns: a lease that is superseded, short or near its expiry is returned
  (``lease.returned``: unspent and funded amounts) once its last hold settles;
  ``close`` returns every lease at shutdown, after requests finished.
* Kafka down (``kafka_up()`` false): leases already held are spent; then a
  scope draws ``emergency_micro`` once per outage if configured, else the
  request is refused (fail closed, 503 ``budget_unavailable``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from ledger.events import Event, LeaseGranted, LeaseRequested
from ledger.leases import PodLease
from proxy.errors import GatewayError, RateLimited

log = logging.getLogger("farebox.wallet")


@dataclass(frozen=True)
class WalletPolicy:
    lease_wait_s: float = 2.0
    low_water_pct: int = 30
    emergency_micro: int = 0
    expiry_margin_s: float = 5.0  # stop funding from a lease this long before it expires


class BudgetUnavailable(GatewayError):
    def __init__(self, message: str) -> None:
        super().__init__(message, status=503, code="budget_unavailable")


class Wallets:
    def __init__(self, pod: str, emit: Callable[[Event], None], clock: Callable[[], datetime],
                 policy: WalletPolicy, kafka_up: Callable[[], bool] = lambda: True) -> None:
        self.pod = pod
        self.emit = emit
        self.clock = clock
        self.policy = policy
        self.kafka_up = kafka_up
        self.leases: dict[str, list[PodLease]] = {}  # per scope, newest last
        self.asked: dict[str, tuple[str, asyncio.Future[LeaseGranted]]] = {}  # scope -> lease id asked, answer
        self.funded: dict[str, dict[str, PodLease]] = {}  # request id -> scope -> lease
        self.exhausted: dict[str, datetime] = {}  # scope -> when a grant of 0 said so
        self.emergency_used: set[str] = set()
        self._ids = itertools.count(1)
        self._prefix = f"{pod}-{uuid.uuid4().hex[:8]}"
        self.stats = {"funded_locally": 0, "waited": 0, "asked": 0, "granted_micro": 0, "returned_micro": 0}

    # --- admission ----------------------------------------------------------------

    async def admit(self, request_id: str, scopes: list[str], hold: int, hold_ttl_s: int = 900) -> dict[str, str]:
        """Fund ``hold`` on every scope (limited scopes only); returns scope -> lease id, or raises."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.policy.lease_wait_s
        while True:
            now = self.clock()
            margin = timedelta(seconds=self.policy.expiry_margin_s)
            funding = {s: self._covering(s, hold, now, margin) for s in scopes}
            short = [s for s, lease in funding.items() if lease is None]
            if not short:
                self.stats["funded_locally"] += 1
                return self._fund(request_id, funding, hold, now + timedelta(seconds=hold_ttl_s))  # type: ignore[arg-type]
            if not self.kafka_up():
                if self.policy.emergency_micro >= hold and all(s not in self.emergency_used for s in short):
                    for scope in short:  # recorded: its admits carry the pseudo-lease id
                        self.emergency_used.add(scope)
                        lease = PodLease(f"emergency/{self._prefix}/{scope}", scope, self.policy.emergency_micro,
                                         now + timedelta(hours=1))
                        self.leases.setdefault(scope, []).append(lease)
                    continue
                raise BudgetUnavailable("Budget leases cannot be renewed right now (event log unreachable) "
                                        "and this pod's leases are spent; retry shortly.")
            self.stats["waited"] += 1
            answers = [self._ask(scope, hold) for scope in short]
            left = deadline - loop.time()
            done, _ = await asyncio.wait(answers, timeout=max(left, 0))
            if len(done) < len(answers):
                raise BudgetUnavailable("The budget ledger did not answer in time; retry shortly.")
            for fut in done:
                granted = fut.result()
                if granted.amount_micro < hold:  # the processor had less than this hold left
                    raise RateLimited(f"The budget of {granted.scope} is exhausted for this request.",
                                      code="budget_exhausted")

    def _covering(self, scope: str, hold: int, now: datetime, margin: timedelta) -> PodLease | None:
        for lease in self.leases.get(scope, ()):
            if lease.covers(hold, now, margin):
                return lease
        return None

    def _fund(self, request_id: str, funding: dict[str, PodLease], hold: int, expires: datetime) -> dict[str, str]:
        for scope, lease in funding.items():
            lease.fund(request_id, hold, expires)
            self.top_up(scope, hold)
        self.funded[request_id] = funding
        return {scope: lease.lease_id for scope, lease in funding.items()}

    def settle(self, request_id: str, charges: dict[str, int]) -> None:
        """A funded request finished: give ``hold - charge`` back to its leases; return idle ones."""
        funded = self.funded.pop(request_id, None)
        if not funded:
            return
        for scope, lease in funded.items():
            lease.settle(request_id, charges.get(scope, 0), self.clock())
            self._maybe_return(scope, lease)

    # --- leases ------------------------------------------------------------------------

    def _ask(self, scope: str, need: int) -> asyncio.Future[LeaseGranted]:
        if scope in self.asked:
            return self.asked[scope][1]
        lease_id = f"{self._prefix}-{next(self._ids)}"
        fut: asyncio.Future[LeaseGranted] = asyncio.get_running_loop().create_future()
        self.asked[scope] = (lease_id, fut)
        self.stats["asked"] += 1
        self.emit(LeaseRequested(time=self.clock(), lease_id=lease_id, scope=scope, pod=self.pod,
                                 amount_micro=need, expires_at=None))
        return fut

    def on_grant(self, granted: LeaseGranted) -> None:
        """A grant arrived (Redis publish or poll); a refusal is a grant of 0."""
        asked = self.asked.get(granted.scope)
        if asked is None or asked[0] != granted.lease_id:
            return
        del self.asked[granted.scope]
        assert granted.expires_at is not None
        if granted.amount_micro:
            leases = self.leases.setdefault(granted.scope, [])
            for old in leases:
                self._maybe_return(granted.scope, old, superseded=True)
            leases.append(PodLease(granted.lease_id, granted.scope, granted.amount_micro, granted.expires_at))
            self.stats["granted_micro"] += granted.amount_micro
        else:
            self.exhausted[granted.scope] = self.clock()
            self.emit(PodLease(granted.lease_id, granted.scope, 0, granted.expires_at).returned(self.clock(), self.pod))
        if not asked[1].done():
            asked[1].set_result(granted)

    def _maybe_return(self, scope: str, lease: PodLease, superseded: bool = False) -> None:
        leases = self.leases.get(scope, [])
        if lease not in leases or lease.open:
            return
        now = self.clock()
        expiring = now + timedelta(seconds=self.policy.expiry_margin_s) >= lease.expires_at
        newer = leases[-1] is not lease
        if superseded or expiring or newer:
            leases.remove(lease)
            self._return(lease, now)

    def _return(self, lease: PodLease, now: datetime) -> None:
        if lease.lease_id.startswith("emergency/"):
            return  # never granted: nothing to give back
        self.stats["returned_micro"] += max(lease.balance, 0)
        self.emit(lease.returned(now, self.pod))

    def top_up(self, scope: str, need: int) -> None:
        """Ask for the next lease in the background when the newest one runs low."""
        if scope in self.asked or not self.kafka_up():
            return
        leases = self.leases.get(scope)
        if leases and leases[-1].balance * 100 >= leases[-1].granted * self.policy.low_water_pct:
            return
        self._ask(scope, need)

    def sweep(self) -> None:
        """Return idle leases that are near expiry; forget answers that never came."""
        for scope, leases in list(self.leases.items()):
            for lease in list(leases):
                self._maybe_return(scope, lease)

    def close(self) -> None:
        """Shutdown, after requests finished: return every lease (open holds stay funded by the ledger)."""
        now = self.clock()
        for leases in self.leases.values():
            for lease in leases:
                self._return(lease, now)
        self.leases.clear()
