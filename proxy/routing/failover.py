"""Trying candidates in order until one answers, before any byte reaches the caller.

What happens after a failure is decided in ``attempts.py`` (by error class);
this module runs it: at most ``max_attempts`` attempts within the alias's
deadline, retries spent from the alias's retry budget, a jittered backoff
after 5xx/timeouts, optional hedging. Every attempt is metered, failed,
cancelled or not, and reported to the routing state (breakers, health, 429
pauses) exactly once.

A cancelled attempt (the caller left, or it lost a hedge) is metered with the
estimated input tokens: the provider has usually billed them already.

Routing decides the order and when to stop; admitting and metering are the
request shell's, handed in as ``Tries``: the meter that records each
attempt, and ``clear``, the admission step that takes a deployment's share
of the provider's limits before it is called.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, Generic, Protocol, Sequence, TypeVar

from ledger.usage import TokenUsage
from proxy.errors import ClientGone, Drained, GatewayError, HedgeLost, UpstreamError, UpstreamUnavailable
from proxy.outcomes import CLIENT_CLOSED, DRAIN, HEDGE_LOST, NEUTRAL, OK
from proxy.routing.attempts import backoff_s, hedge_delay_s, verdict
from proxy.routing.chain import Chain
from proxy.routing.router import blocked_list, pinned_refusal, unavailable
from proxy.routing.state import RoutingState
from proxy.snapshot import Deployment

T = TypeVar("T")
CAPACITY_STEP_S = 0.025  # the waiter whose turn it is asks its short candidates again this often
CAPACITY_STEP_MAX_S = 0.2  # the others look again at least this often (the room wakes them when it changes)



class AttemptMeter(Protocol):
    """Records one attempt (``proxy.metering.meter.Meter``)."""

    def attempted(self, dep: Deployment, *, started: float, usage: TokenUsage | None,
                  error: BaseException | None = None, ttft_s: float | None = None, status: int | None = None) -> int: ...

    def waited(self, seconds: float, served: bool) -> None:
        """The request waited ``seconds`` for provider capacity; ``served``: a deployment then cleared."""

    def in_room(self, alias: str, delta: int) -> None:
        """The request joined (+1) or left (-1) the alias's wait room."""


Clear = Callable[[Deployment], Awaitable[GatewayError | None]]


@dataclass(slots=True)  # built per request: plain slots, no frozen-init cost
class Tries:
    """What running a chain needs from the request's shell."""

    meter: AttemptMeter
    clear: Clear  # take the deployment's share of provider limits before calling it; the refusal if short
    state: RoutingState
    rng: random.Random
    est_input: int  # what a cancelled attempt is metered with
    queued: bool = True  # waits its turn in the alias's room while others wait (a batch request: cleared already)


class Attempts(Generic[T]):
    """One request's attempts over an ordered chain of candidates."""

    def __init__(self, cands: Sequence[Deployment], chain: Chain, tries: Tries,
                 attempt: Callable[[Deployment], Awaitable[T]], *, streaming: bool) -> None:
        self.tries, self.meter, self.attempt, self.streaming = tries, tries.meter, attempt, streaming
        self.plan = chain
        self.alias = chain.alias
        self.state = tries.state
        self.clock = self.state.clock
        self.chain = list(cands)
        self.queue = list(cands)
        self.max_attempts = chain.max_attempts
        self.deadline = self.clock() + self.alias.total_timeout_s
        self.budget = self.state.budget(self.alias)
        self.tried = 0
        self.last: GatewayError | None = None
        self.stop = False
        self.backoff = False
        self.short: list[Deployment] = []  # candidates passed over for want of provider capacity, to try again
        self.capacity_until = self.clock() + self.alias.capacity_wait_s

    async def run(self) -> tuple[Deployment, T, float]:
        """(deployment, its answer, attempt start) of the first candidate that answers; else the last error."""
        self.budget.request(self.clock())
        while not self.stop:
            if self.backoff and self._more():
                await asyncio.sleep(max(0.0, min(backoff_s(self.tried, self.alias.backoff_s, self.tries.rng),
                                                 self.deadline - self.clock())))
            self.backoff = False
            dep = await self._next()
            if dep is None:
                break
            try:
                if self.alias.hedge:
                    return await self._hedged(dep)
                answer, started = await self._one(dep)
                return dep, answer, started
            except UpstreamError:
                continue  # metered and recorded by _one; self.stop says whether to go on
        raise self._final_error()

    def _more(self) -> bool:
        return bool(self.queue) and self.tried < self.max_attempts and self.clock() < self.deadline

    async def _next(self) -> Deployment | None:
        """The next candidate cleared to be called (breaker, 429 pause, mirror, retry budget), or None. When no
        attempt was made yet and every candidate left was short only of provider capacity (its mirror spent, its
        fleet full), the request waits in the alias's room and asks again on its turn, until ``capacity_wait_s``
        has passed: capacity comes back by the second (a mirror refills, a stream ends), and a request that waits
        a moment is better served than refused. Teams waiting on the alias take the capacity in turn, and while
        anybody waits a new request joins them rather than asking first (``proxy.routing.fair_wait``)."""
        began, room, ticket = 0.0, None, (0.0, 0)
        team = self.plan.needs.team or ""
        waiting = self.state.waits.get(self.alias.name)
        if self.tries.queued and self.tried == 0 and waiting is not None and waiting.busy():  # no queue jumping
            room, began = waiting, self.clock()
            ticket = room.join(team)
            self.meter.in_room(self.alias.name, 1)
        paused = False
        try:
            while True:
                if room is None or room.may_try(team, ticket):  # only the waiter whose turn it is asks
                    if self.short:
                        self.queue, self.short = self.short, []  # ask the short candidates again
                    dep = await self._cleared()
                    if dep is not None or self.tried > 0 or not self.short:
                        if room is not None:
                            if paused:
                                self.meter.waited(self.clock() - began, dep is not None)
                            room.leave(team, ticket, dep is not None)
                            self.meter.in_room(self.alias.name, -1)
                            room = None
                        return dep
                left = min(self.capacity_until, self.deadline) - self.clock()
                if left <= 0:
                    if paused:
                        self.meter.waited(self.clock() - began, False)
                    return None
                if room is None:
                    room, began = self.state.wait_room(self.alias.name), self.clock()
                    ticket = room.join(team)
                    self.meter.in_room(self.alias.name, 1)
                # whose turn it is asks again soon; the others sleep until the room changes (or the longer pause)
                await room.pause(min(CAPACITY_STEP_S if room.may_try(team, ticket) else CAPACITY_STEP_MAX_S, left))
                paused = True
        finally:
            if room is not None:
                room.leave(team, ticket, False)
                self.meter.in_room(self.alias.name, -1)

    async def _cleared(self) -> Deployment | None:
        while self._more():
            now = self.clock()
            dep = self.queue.pop(0)
            blocked = self.state.blocked(dep, now)
            # A 429-paused deployment is a last resort: only when no other attempt was possible.
            last_resort = (blocked == "paused" and self.tried == 0
                           and all(self.state.blocked(d, now) is not None for d in self.queue))
            if blocked is not None and not last_resort:
                continue
            if self.tried > 0 and not self.budget.allows(now):
                self.queue.clear()  # the alias's retries are spent: the caller gets the last error
                return None
            if not self.state.start(dep, now, last_resort=last_resort):
                continue
            short = await self.tries.clear(dep)
            if short is not None:  # the provider-limit mirror is spent: skip without a call
                self.state.finish(dep, NEUTRAL, self.clock())
                self.last = self.last if isinstance(self.last, UpstreamError) else short
                self.short.append(dep)
                continue
            if self.tried > 0:
                self.budget.spend(self.clock())
            self.tried += 1
            return dep
        return None

    async def _one(self, dep: Deployment) -> tuple[T, float]:
        """One metered attempt within the request deadline."""
        started = time.monotonic()
        try:
            async with asyncio.timeout(max(self.deadline - self.clock(), 0.0)):
                answer = await self.attempt(dep)
        except TimeoutError:
            exc = UpstreamUnavailable("The request deadline passed before the provider answered.", code="upstream_timeout")
            self._failed(dep, exc, started)
            raise exc from None
        except UpstreamError as exc:
            self._failed(dep, exc, started)
            raise
        except asyncio.CancelledError as cancel:
            self._cancelled(dep, started, cancel.args[0] if cancel.args else CLIENT_CLOSED)
            raise
        now = self.clock()
        if self.streaming:
            self.state.observe_ttft(dep, now - started)  # its outcome is reported when the stream ends
        else:
            self.state.finish(dep, OK, now)
        return answer, started

    def _failed(self, dep: Deployment, exc: UpstreamError, started: float) -> None:
        self.meter.attempted(dep, started=started, usage=None, error=exc)
        v = verdict(exc, self.alias.content_filter_failover)
        self.state.finish(dep, v.outcome, self.clock(), retry_after_s=v.retry_after_s)
        self.last, self.backoff, self.stop = exc, v.backoff, not v.retry

    def _cancelled(self, dep: Deployment, started: float, reason: str) -> None:
        usage = TokenUsage(input=self.tries.est_input, source="estimated")
        error: Exception = (
            HedgeLost("another deployment answered first") if reason == HEDGE_LOST
            else Drained("the pod is shutting down") if reason == DRAIN
            else ClientGone("the caller left")
        )
        self.meter.attempted(dep, started=started, usage=usage, error=error, status=499)
        self.state.finish(dep, NEUTRAL, self.clock())

    async def _hedged(self, dep: Deployment) -> tuple[Deployment, T, float]:
        """Start a second candidate if the first has no answer by its p95 TTFT; keep whichever answers first."""
        tasks: dict[asyncio.Future, Deployment] = {asyncio.ensure_future(self._one(dep)): dep}
        delay = hedge_delay_s(self.alias.hedge_after_s, self.state.health.get(dep.id), self.alias.first_token_timeout_s)
        reason = HEDGE_LOST
        try:
            if delay is not None:
                done, _ = await asyncio.wait(tasks, timeout=delay)
                if not done:
                    second = await self._next()
                    if second is not None:
                        tasks[asyncio.ensure_future(self._one(second))] = second
            while tasks:
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                winner = None
                for task in done:
                    d = tasks.pop(task)
                    exc = task.exception()
                    if exc is not None and not isinstance(exc, UpstreamError):
                        raise exc
                    if exc is None and winner is None:
                        winner = (d, *task.result())
                    elif exc is None:  # answered in the same instant as the winner: close it, it lost
                        _close(task.result()[0])
                        self._cancelled(d, task.result()[1], HEDGE_LOST)
                if winner is not None:
                    return winner
            assert self.last is not None
            raise self.last
        except asyncio.CancelledError as cancel:
            reason = cancel.args[0] if cancel.args else CLIENT_CLOSED  # the request is going away, not a lost race
            raise
        finally:
            for task in tasks:
                task.cancel(reason)
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)

    def _final_error(self) -> GatewayError:
        """The last attempt's error, or the routing refusal if none was made; told as the key's pin's doing
        when the pin kept the request from deployments that could have taken it."""
        now, needs = self.clock(), self.plan.needs
        if self.last is not None:
            last, why = self.last, None
        else:
            last = unavailable(self.alias, self.chain, self.state, now, needs.data_class)
            why = blocked_list(self.chain, self.state, now)
        return pinned_refusal(self.plan.snapshot, self.alias, needs.data_class, needs.regions, needs.allowed, last, why)


def _close(answer: object) -> None:
    close = getattr(answer, "close", None)
    if callable(close):
        close()


async def first_answer(cands: Sequence[Deployment], chain: Chain, tries: Tries,
                       attempt: Callable[[Deployment], Awaitable[T]], *, streaming: bool) -> tuple[Deployment, T, float]:
    """(deployment, its answer, attempt start) of the first of ``cands`` (the chain's, in order) that answers."""
    return await Attempts(cands, chain, tries, attempt, streaming=streaming).run()
