"""Money at admission, distributed mode: a wallet of leases per budget scope.

A pod spends slices of each scope's budget that the ledger processor
granted (``ledger.leases``). ``Wallets.admit`` funds a request's hold on
every limited scope from a lease that covers it — no network round trip —
or, when a scope's leases are short, asks for one (``lease.requested`` on
the event log), waits up to ``lease_wait_s`` for the grant (Redis publish,
``on_grant``) and tries again. Funding happens in one synchronous step after
the last ``await``, so the caller records ``request.admitted`` before any
other request can take the same money.

* Batching: one ask per scope is in flight at a time, for the sum of the
  holds of every request then waiting on the scope (``least_micro``: the
  smallest of them). The processor answers with a slice (or, near the limit,
  the demand it can still fund); waiters it did not cover ask again, together.
  ``budget_exhausted`` (429, final) needs evidence: a fresh projection
  (``ScopeStates``) whose settled spend leaves less than the request's hold.
  503 ``budget_unavailable`` means the ledger did not answer this scope at
  all while the request waited (up to its deadline: a slow ledger is waited
  for, an ask unanswered after ``lease_wait_s`` is not given up on early).
* Money in flight is not money spent: a refused ask (a grant of 0: not even
  the smallest waiting hold fits), a scope at "hard" (fully committed), or an
  ask answered but not for this request, without that evidence, does not
  refuse the request. It waits, up to the caller's ``max_wait_s`` (at least
  ``lease_wait_s``), for a settlement on this pod or ``retry_s``, and asks
  again; at the deadline it gets 429 ``budget_reserved`` with Retry-After. A
  stale or missing projection is no evidence: the answer is then
  ``budget_reserved``, never a false ``budget_exhausted``.
* At the hard limit: when the worker's projection (``ScopeStates``) says a
  scope is fully committed this period and settled spend leaves less than
  the hold, a request the leases do not cover is refused at once (429)
  without asking.

* Top-up: after funding, a scope whose current lease fell below
  ``low_water_pct`` of its grant asks for the next one in the background.
* Returns (``lease.returned``: unspent and funded amounts): a lease superseded
  by a new grant at once, so a pod keeps no fragments smaller than a hold (its
  open holds stay with the ledger and their settlements release to the scope,
  not to this pod); an older or expiring lease once its last hold settles;
  ``close`` returns every lease at shutdown, after requests finished.
* Kafka down (``kafka_up()`` false): leases already held are spent; then a
  scope draws ``emergency_micro`` once per outage if configured, else the
  request waits up to ``lease_wait_s`` for Kafka to come back (a pod spools
  through a broker's slow moment too) and is then refused (fail closed, 503
  ``budget_unavailable``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ledger.events import Event, LeaseGranted, LeaseRequested, LeaseReturned
from ledger.leases import PodLease
from proxy.admission.scope_states import ScopeStates
from proxy.errors import BudgetRefused, GatewayError

log = logging.getLogger("farebox.wallet")


@dataclass(frozen=True)
class WalletPolicy:
    lease_wait_s: float = 2.0
    low_water_pct: int = 30
    emergency_micro: int = 0
    expiry_margin_s: float = 5.0  # stop funding from a lease this long before it expires
    retry_s: float = 0.25  # money in flight elsewhere: ask again this often (or at a settlement here)


@dataclass
class Ask:
    """One lease request in flight for a scope: who it was for and its answer."""

    lease_id: str
    need: int
    members: frozenset[str]  # the waiting requests whose holds make up ``need`` (empty: a top-up)
    answer: asyncio.Future[LeaseGranted]
    sent_at: float = field(default=0.0)


_EPSILON_S = 0.005  # a wait that ends this close to the deadline has reached it


class BudgetUnavailable(GatewayError):
    def __init__(self, message: str) -> None:
        super().__init__(message, status=503, code="budget_unavailable")


class Wallets:
    def __init__(self, pod: str, emit: Callable[[Event], object], clock: Callable[[], datetime],
                 policy: WalletPolicy, kafka_up: Callable[[], bool] = lambda: True,
                 states: ScopeStates | None = None, observe_rtt: Callable[[float], None] = lambda s: None) -> None:
        self.pod = pod
        self.emit = emit
        self.clock = clock
        self.policy = policy
        self.kafka_up = kafka_up
        self.states = states or ScopeStates()
        self.observe_rtt = observe_rtt
        self.leases: dict[str, list[PodLease]] = {}  # per scope, newest last
        self.asked: dict[str, Ask] = {}  # scope -> the ask in flight
        self.heard: dict[str, float] = {}  # scope -> loop time of the ledger's last answer for it
        self.waiting: dict[str, dict[str, int]] = {}  # scope -> request id -> hold, waiting for a grant
        self.funded: dict[str, dict[str, PodLease]] = {}  # request id -> scope -> lease
        self.emergency_used: set[str] = set()
        self._settled: asyncio.Event | None = None  # set (and replaced) at every settlement on this pod
        self._ids = itertools.count(1)
        self._prefix = f"{pod}-{uuid.uuid4().hex[:8]}"
        self.stats = {"funded_locally": 0, "waited": 0, "asked": 0, "granted_micro": 0, "returned_micro": 0,
                      "refused_at_hard": 0, "granted": 0, "returned": 0}

    # --- admission ----------------------------------------------------------------

    async def admit(self, request_id: str, scopes: list[str], hold: int, hold_ttl_s: int = 900,
                    period: str | None = None, max_wait_s: float = 0.0) -> dict[str, str]:
        """Fund ``hold`` on every scope (limited scopes only); returns scope -> lease id, or raises.

        ``period`` (the budget month now) lets the projection's "hard" answer at once; None: always ask.
        ``max_wait_s``: how long the request may wait for money in flight (at least ``lease_wait_s``).
        """
        if hold <= 0:
            return {}  # nothing to fund: a free request spends no lease
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + max(self.policy.lease_wait_s, max_wait_s)
        self.states.watch(scopes, loop.time())
        answered: set[str] = set()  # scopes the ledger answered for while this request waited
        try:
            while True:
                now = self.clock()
                margin = timedelta(seconds=self.policy.expiry_margin_s)
                funding = {s: self._covering(s, hold, now, margin) for s in scopes}
                short = [s for s, lease in funding.items() if lease is None]
                if not short:
                    self.stats["funded_locally"] += 1
                    return self._fund(request_id, funding, hold, now + timedelta(seconds=hold_ttl_s))  # type: ignore[arg-type]
                full = [s for s in short if period is not None and self.states.hard(s, period, loop.time())]
                spent = [s for s in full if self._spent(s, hold, period, loop.time())]
                if spent:
                    self.stats["refused_at_hard"] += 1
                    raise _exhausted(spent[0])
                if full:  # committed, not spent: asking would be refused; wait for money to come back
                    answered.update(full)  # the projection answered for the ledger
                    await self._pause(full[0], hold, period, started, deadline)
                    continue
                if not self.kafka_up():
                    if self._emergency(short, hold, now):
                        continue
                    if min(deadline, started + self.policy.lease_wait_s) - loop.time() > self.policy.retry_s:
                        await asyncio.sleep(self.policy.retry_s)  # a spooling blip may end within lease_wait_s
                        continue
                    raise BudgetUnavailable("Budget leases cannot be renewed right now (event log unreachable) "
                                            "and this pod's leases are spent; retry shortly.")
                self.stats["waited"] += 1
                for scope in short:
                    self.waiting.setdefault(scope, {})[request_id] = hold
                asks = {scope: self._ask(scope) for scope in short}
                asked_at = loop.time()
                done, _ = await asyncio.wait([a.answer for a in asks.values()],
                                             timeout=max(min(deadline, asked_at + self.policy.lease_wait_s)
                                                         - asked_at, 0))
                answered.update(scope for scope, ask in asks.items() if ask.answer in done)
                if len(done) < len(asks):
                    if deadline - loop.time() > _EPSILON_S:  # a slow ledger is waited for up to the deadline
                        continue  # (the same asks; Kafka's state is looked at again first)
                    # the ledger answered this scope while this request waited (its own ask, or one
                    # ahead of it): contended, not silent
                    contended = [s for s in short if s in answered or self.heard.get(s, -1.0) >= started]
                    if contended:  # the ledger is answering; what it grants goes to the requests ahead
                        raise self._after_wait(contended[0], hold, period, loop.time(), loop.time() - started)
                    raise BudgetUnavailable("The budget ledger did not answer in time; retry shortly.")
                for scope, ask in asks.items():
                    # in the batch and refused: not even the smallest waiting hold fits what is left
                    if request_id in ask.members and ask.answer.result().amount_micro == 0:
                        if self._spent(scope, hold, period, loop.time()):
                            raise _exhausted(scope)
                        await self._pause(scope, hold, period, started, deadline)
                        break
        finally:
            for scope in scopes:
                waiting = self.waiting.get(scope)
                if waiting is not None and waiting.pop(request_id, None) is not None and not waiting:
                    del self.waiting[scope]

    def _spent(self, scope: str, hold: int, period: str | None, now: float) -> bool:
        """Evidence that the money is gone: a fresh projection whose settled spend leaves less than ``hold``.
        Without a fresh reading nothing is known, and an unfunded request is told to retry, never that the
        budget is exhausted."""
        view = self.states.view(scope, period, now) if period is not None else None
        return view is not None and view.limit is not None and view.limit - view.settled < hold

    async def _pause(self, scope: str, hold: int, period: str | None, started: float, deadline: float) -> None:
        """Wait for a settlement on this pod or ``retry_s``; past ``deadline``, raise the refusal after the wait."""
        loop = asyncio.get_running_loop()
        left = deadline - loop.time()
        if left <= 0:
            raise self._after_wait(scope, hold, period, loop.time(), loop.time() - started)
        if self._settled is None:
            self._settled = asyncio.Event()
        try:
            await asyncio.wait_for(self._settled.wait(), min(self.policy.retry_s, left))
        except TimeoutError:
            pass

    def _after_wait(self, scope: str, hold: int, period: str | None, now: float,
                    waited_s: float | None = None) -> BudgetRefused:
        """Unfunded after the wait while the ledger answered: ``budget_exhausted`` when a fresh projection
        says settled spend leaves less than the hold, else ``budget_reserved`` with Retry-After (the money
        is in holds and leases in flight, or the projection is stale or missing: nothing says it is gone)."""
        waited = round(self.policy.lease_wait_s if waited_s is None else waited_s, 1)
        if self._spent(scope, hold, period, now):
            return _exhausted(scope, waited_s=waited)
        retry = max(1, math.ceil(self.policy.lease_wait_s))
        return BudgetRefused(f"The budget of {scope} is held by requests in flight; none of it was freed for this "
                             f"request within {waited:g} s. Retry in about {retry} s.",
                             code="budget_reserved", scope=scope, retry_after_s=retry)

    def _emergency(self, short: list[str], hold: int, now: datetime) -> bool:
        """Kafka down and leases spent: draw the per-scope emergency allowance, once per outage."""
        if self.policy.emergency_micro < hold or any(s in self.emergency_used for s in short):
            return False
        for scope in short:  # recorded: its admits carry the pseudo-lease id
            self.emergency_used.add(scope)
            lease = PodLease(f"emergency/{self._prefix}/{scope}", scope, self.policy.emergency_micro,
                             now + timedelta(hours=1))
            self.leases.setdefault(scope, []).append(lease)
        return True

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

    def settle(self, request_id: str, charges: Mapping[str, int]) -> None:
        """A funded request finished: give ``hold - charge`` back to its leases; return idle ones."""
        funded = self.funded.pop(request_id, None)
        if not funded:
            return
        for scope, lease in funded.items():
            lease.settle(request_id, charges.get(scope, 0), self.clock())
            self._maybe_return(scope, lease)
        if self._settled is not None:  # wake the requests waiting for money in flight
            self._settled.set()
            self._settled = None

    # --- leases ------------------------------------------------------------------------

    def _ask(self, scope: str, need: int = 0) -> Ask:
        """The ask in flight for ``scope``, or a new one, sent at the end of this loop tick so that every
        request arriving in the same tick joins it; it asks for their holds (plus ``need``, a top-up)."""
        if scope in self.asked:
            return self.asked[scope]
        loop = asyncio.get_running_loop()
        ask = self.asked[scope] = Ask(f"{self._prefix}-{next(self._ids)}", need, frozenset(), loop.create_future())
        loop.call_soon(self._send, scope, ask)
        return ask

    def _send(self, scope: str, ask: Ask) -> None:
        if self.asked.get(scope) is not ask:
            return
        waiting = self.waiting.get(scope, {})
        holds = [*waiting.values(), *([ask.need] if ask.need else [])]
        if not holds:  # everyone gave up before it went out
            del self.asked[scope]
            ask.answer.cancel()
            return
        ask.need, ask.members, ask.sent_at = sum(holds), frozenset(waiting), asyncio.get_running_loop().time()
        self.stats["asked"] += 1
        self.emit(LeaseRequested(time=self.clock(), lease_id=ask.lease_id, scope=scope, pod=self.pod,
                                 amount_micro=ask.need, expires_at=None, least_micro=min(holds)))

    def on_grant(self, granted: LeaseGranted) -> None:
        """A grant arrived (Redis publish or poll); a refusal is a grant of 0."""
        ask = self.asked.get(granted.scope)
        if ask is None or ask.lease_id != granted.lease_id:
            return
        del self.asked[granted.scope]
        now = asyncio.get_running_loop().time()
        self.heard[granted.scope] = now
        self.observe_rtt(now - ask.sent_at)
        assert granted.expires_at is not None
        if granted.amount_micro:
            leases = self.leases.setdefault(granted.scope, [])
            for old in leases:
                self._maybe_return(granted.scope, old, superseded=True)
            leases.append(PodLease(granted.lease_id, granted.scope, granted.amount_micro, granted.expires_at))
            self.stats["granted_micro"] += granted.amount_micro
            self.stats["granted"] += 1
        else:  # a refusal: close the (empty) lease so the ledger forgets it
            self.emit(PodLease(granted.lease_id, granted.scope, 0, granted.expires_at).returned(self.clock(), self.pod))
        if not ask.answer.done():
            ask.answer.set_result(granted)

    def _maybe_return(self, scope: str, lease: PodLease, superseded: bool = False) -> None:
        """Return a lease once idle and short, older than the newest, or near expiry; a superseded one at
        once, open holds and all (the ledger keeps their holds; their settlements release to the scope)."""
        leases = self.leases.get(scope, [])
        if lease not in leases or (lease.open and not superseded):
            return
        now = self.clock()
        expiring = now + timedelta(seconds=self.policy.expiry_margin_s) >= lease.expires_at
        newer = leases[-1] is not lease
        if superseded or expiring or newer:
            leases.remove(lease)
            self._return(lease, now)

    def _return(self, lease: PodLease, now: datetime) -> int | None:
        """Give ``lease`` back to the ledger; the unspent micro-units returned (None: nothing to return)."""
        if lease.lease_id.startswith("emergency/"):
            return None  # never granted: nothing to give back
        unspent = max(lease.balance, 0)
        self.stats["returned_micro"] += unspent
        self.stats["returned"] += 1
        self.emit(lease.returned(now, self.pod))
        return unspent

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

    def close(self) -> tuple[int, int]:
        """Shutdown, after requests finished: return every lease (open holds stay funded by the ledger),
        and every lease still being asked for: its grant may come after we stopped listening, so it is
        returned unspent now (it follows its request on the scope's partition, so the ledger has granted
        it by the time the return arrives). The leases returned and their unspent micro-units."""
        now = self.clock()
        given = [self._return(lease, now) for leases in self.leases.values() for lease in leases]
        returned = [micro for micro in given if micro is not None]
        self.leases.clear()
        for scope, ask in self.asked.items():
            if ask.sent_at:  # sent: a grant is or will be on its way
                self.emit(LeaseReturned(time=now, lease_id=ask.lease_id, scope=scope, pod=self.pod, amount_micro=0,
                                        expires_at=None, funded_micro=0))
            ask.answer.cancel()
        self.asked.clear()
        return len(returned), sum(returned)


def _exhausted(scope: str, waited_s: float | None = None) -> BudgetRefused:
    if waited_s is None:
        return BudgetRefused(f"The budget of {scope} is exhausted for this request.", code="budget_exhausted",
                             scope=scope)
    return BudgetRefused(f"The budget of {scope} is nearly exhausted: what is left went to the requests ahead of "
                         f"this one and none could fund it within {waited_s:g} s.", code="budget_exhausted",
                         scope=scope)
