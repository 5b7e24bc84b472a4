"""Requests waiting for budget money that in-flight holds cover: per-scope FIFO queues (embedded mode).

A request whose budget is there but held by requests in flight
(``budget_reserved``) joins the queue of every limited scope it touches and
waits, at most until its deadline. Only a waiter at the head of *all* its
queues may try again; since every waiter joins its queues at once, in arrival
order, the oldest waiter is the head of all of its queues, so the queues never
deadlock and money freed on a scope goes to the requests in arrival order.

``wake`` (after a settlement or expiry folded into the ledger, or a waiter
leaving) sets the event of every waiter that is now a head everywhere; the
waiter re-decides in its own turn and records its admission before any other
request runs. A new arrival on a scope with a queue waits behind it, even if
the money would fit now: first come, first funded.

``Flights`` remembers, per scope, when the requests in flight were admitted and
how long requests take to settle, for the ``Retry-After`` of a refusal after
the wait: when the earliest in-flight hold is expected to settle.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


@dataclass(eq=False, slots=True)
class Waiter:
    scopes: tuple[str, ...]
    woken: asyncio.Event = field(default_factory=asyncio.Event)


class AdmissionQueue:
    def __init__(self) -> None:
        self._queues: dict[str, deque[Waiter]] = {}

    def ahead(self, scopes: Iterable[str]) -> bool:
        """Whether some request already waits on one of ``scopes``."""
        return any(self._queues.get(s) for s in scopes)

    def join(self, scopes: Sequence[str]) -> Waiter:
        waiter = Waiter(tuple(dict.fromkeys(scopes)))
        for scope in waiter.scopes:
            self._queues.setdefault(scope, deque()).append(waiter)
        return waiter

    def leave(self, waiter: Waiter) -> None:
        for scope in waiter.scopes:
            queue = self._queues.get(scope)
            if queue is None:
                continue
            try:
                queue.remove(waiter)
            except ValueError:
                pass
            if not queue:
                del self._queues[scope]
        self.wake()

    def is_head(self, waiter: Waiter) -> bool:
        return all((q := self._queues.get(s)) and q[0] is waiter for s in waiter.scopes)

    def wake(self) -> None:
        for queue in self._queues.values():
            head = queue[0]
            if not head.woken.is_set() and self.is_head(head):
                head.woken.set()

    def waiting(self, scope: str) -> int:
        return len(self._queues.get(scope, ()))

    def depth(self) -> int:
        """Requests waiting, each counted once however many scopes it queues on (for ``/metrics``)."""
        return len({id(w) for queue in self._queues.values() for w in queue})


class Flights:
    """Admission times of requests in flight per scope and a moving mean of how long they take."""

    def __init__(self, first_guess_s: float = 1.0, weight: float = 0.1) -> None:
        self.mean_s = first_guess_s
        self.weight = weight
        self._open: dict[str, tuple[float, tuple[str, ...]]] = {}  # request id -> (admitted at, scopes)
        self._by_scope: dict[str, dict[str, float]] = {}

    def admitted(self, request_id: str, scopes: Sequence[str], at_s: float) -> None:
        self._open[request_id] = (at_s, tuple(scopes))
        for scope in scopes:
            self._by_scope.setdefault(scope, {})[request_id] = at_s

    def closed(self, request_id: str, at_s: float | None) -> None:
        entry = self._open.pop(request_id, None)
        if entry is None:
            return
        admitted_at, scopes = entry
        for scope in scopes:
            flights = self._by_scope.get(scope)
            if flights is not None:
                flights.pop(request_id, None)
                if not flights:
                    del self._by_scope[scope]
        if at_s is not None and at_s >= admitted_at:
            self.mean_s += self.weight * (at_s - admitted_at - self.mean_s)

    def retry_after_s(self, scope: str, now_s: float) -> int:
        """Whole seconds until the earliest hold in flight on ``scope`` is expected to settle (at least 1)."""
        flights = self._by_scope.get(scope)
        if not flights:
            return 1
        due = min(flights.values()) + self.mean_s
        return max(1, math.ceil(due - now_s))
