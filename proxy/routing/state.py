"""What a pod knows about its deployments right now: breakers, health, 429 pauses, retry budgets.

Per pod and in memory; in distributed mode breaker opens and closes are
shared between pods through Redis by ``proxy.routing.breaker_sync``. The router reads it through ``available`` and ``weight_factor``;
the failover loop writes it through ``start`` / ``finish``. Time comes from
the clock passed in (monotonic seconds).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from proxy.outcomes import NEUTRAL, OK, RATE_LIMITED
from proxy.routing.breaker import Breaker
from proxy.routing.fair_wait import Remote, WaitRoom
from proxy.routing.health import Health
from proxy.routing.retry_budget import RetryBudget
from proxy.snapshot import Alias, Deployment

log = logging.getLogger("farebox.routing")



@dataclass
class RoutingState:
    clock: Callable[[], float] = time.monotonic
    breakers: dict[str, Breaker] = field(default_factory=dict)
    health: dict[str, Health] = field(default_factory=dict)
    paused_until: dict[str, float] = field(default_factory=dict)  # 429 Retry-After per deployment
    budgets: dict[str, RetryBudget] = field(default_factory=dict)
    headroom: dict[str, tuple[float, float]] = field(default_factory=dict)  # (read at, weight factor), see chain.py
    transitions: deque = field(default_factory=lambda: deque(maxlen=100))  # (time, deployment, state)
    waits: dict[str, WaitRoom] = field(default_factory=dict)  # alias -> its requests waiting for capacity
    # alias -> the other pods' waiting teams (distributed mode: proxy.routing.wait_sync keeps it)
    remote_waits: dict[str, Remote] = field(default_factory=dict)
    wait_changed: Callable[[], None] = lambda: None  # a waiter joined or left a room (wait_sync publishes it)

    def wait_room(self, alias: str) -> WaitRoom:
        room = self.waits.get(alias)
        if room is None:
            room = self.waits[alias] = WaitRoom(changed=lambda: self.wait_changed())
            room.remote = self.remote_waits.get(alias, {})
        return room

    def breaker(self, dep: Deployment) -> Breaker:
        b = self.breakers.get(dep.id)
        if b is None:
            b = self.breakers[dep.id] = Breaker(dep.breaker)
        elif b.policy != dep.breaker:  # a config change applies to the live breaker
            b.policy = dep.breaker
        return b

    def health_of(self, dep_id: str) -> Health:
        h = self.health.get(dep_id)
        if h is None:
            h = self.health[dep_id] = Health()
        return h

    def budget(self, alias: Alias) -> RetryBudget:
        b = self.budgets.get(alias.name)
        if b is None:
            b = self.budgets[alias.name] = RetryBudget(alias.retry_budget_pct, alias.retry_budget_min, alias.retry_window_s)
        else:
            b.pct, b.minimum, b.window_s = alias.retry_budget_pct, alias.retry_budget_min, alias.retry_window_s
        return b

    # -- what the router asks -------------------------------------------------

    def blocked(self, dep: Deployment, now: float) -> str | None:
        """Why the deployment may not be tried now ("paused", "circuit_open"), or None."""
        if self.paused_until.get(dep.id, 0.0) > now:
            return "paused"
        b = self.breakers.get(dep.id)
        if b is not None and not b.available(now):
            return "circuit_open"
        return None

    def wait_s(self, dep: Deployment, now: float) -> float:
        """Seconds until a blocked deployment may be tried again."""
        b = self.breakers.get(dep.id)
        until = max(self.paused_until.get(dep.id, 0.0), b.open_until if b and b.state == "open" else 0.0)
        return max(until - now, 0.0)

    def weight_factors(self, deps: list[Deployment], now: float) -> dict[str, float]:
        ewmas = [h.ttft_ewma_s for d in deps if (h := self.health.get(d.id)) and h.ttft_ewma_s is not None]
        best = min(ewmas) if ewmas else None
        return {d.id: (self.health[d.id].factor(now, best) if d.id in self.health else 1.0) for d in deps}

    # -- what the failover loop tells ------------------------------------------

    def start(self, dep: Deployment, now: float, *, last_resort: bool = False) -> bool:
        """Permission to send one attempt (takes a half-open probe slot); a paused one only as a last resort."""
        if self.paused_until.get(dep.id, 0.0) > now and not last_resort:
            return False
        return self.breaker(dep).acquire(now)

    def finish(self, dep: Deployment, outcome: str, now: float, *, ttft_s: float | None = None,
               retry_after_s: float | None = None) -> None:
        """How a started attempt ended; exactly once per ``start`` that returned True."""
        b = self.breaker(dep)
        if outcome == RATE_LIMITED:
            pause = retry_after_s if retry_after_s is not None else 1.0
            self.paused_until[dep.id] = max(self.paused_until.get(dep.id, 0.0), now + pause)
            b.release()
            return
        if outcome == NEUTRAL:
            b.release()
            return
        self.health_of(dep.id).observe(now, outcome == OK, ttft_s)
        changed = b.record(now, outcome == OK)
        if changed is not None:
            self.transitions.append((time.time(), dep.id, changed))
            if changed == "open":
                log.warning("circuit of deployment %s opened for %.1fs", dep.id, b.cooldown_s)
            else:
                log.warning("circuit of deployment %s closed", dep.id)

    def observe_ttft(self, dep: Deployment, ttft_s: float) -> None:
        """A stream's first token, before its outcome is known (feeds hedging's p95)."""
        h = self.health_of(dep.id)
        h.ttfts.append(ttft_s)
        h.ttft_ewma_s = ttft_s if h.ttft_ewma_s is None else 0.8 * h.ttft_ewma_s + 0.2 * ttft_s

    def summary(self, now: float) -> dict:
        """For /health: breakers not closed and deployments paused."""
        return {
            "breakers": {d: {"state": b.state, "cooldown_s": b.cooldown_s} for d, b in self.breakers.items() if b.state != "closed"},
            "paused": {d: round(u - now, 3) for d, u in self.paused_until.items() if u > now},
            "transitions": [{"at": t, "deployment": d, "state": st} for t, d, st in self.transitions],
        }
