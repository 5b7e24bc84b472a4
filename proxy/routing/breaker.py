"""A circuit breaker per deployment: closed, open, half-open. Pure: time is passed in.

- **closed**: traffic flows; outcomes are counted in one-second buckets over
  ``window_s``. More than ``error_pct`` retryable failures over at least
  ``min_requests`` opens the circuit.
- **open**: the router skips the deployment, so callers go straight to the
  next one without paying a timeout first. After the cooldown it half-opens.
- **half-open**: at most ``probes`` requests at a time are let through.
  ``close_after`` consecutive successes close it; one failure reopens it with
  the cooldown doubled (up to ``max_cooldown_s``).

Shared between pods (distributed mode, ``shared_breakers.py``): a pod's own
transitions to open or closed are counted in ``changes`` so they can be told
to the others; a transition told by another pod is applied with
``open_remote`` / ``close_remote`` and is not counted, so it is never echoed.

Only retryable failures (5xx, timeouts, connection errors, broken streams)
count. 429s are a routing signal (the deployment is paused for its
Retry-After, see ``state.py``), and a caller's bad request says nothing about
the deployment.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from proxy.snapshot import BreakerPolicy

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"


@dataclass
class Breaker:
    policy: BreakerPolicy
    state: str = CLOSED
    open_until: float = 0.0
    cooldown_s: float = 0.0  # the current cooldown; grows while probes fail
    opened_at: float | None = None
    probes_out: int = 0
    probe_successes: int = 0
    # (second, requests, failures), oldest first
    buckets: deque = field(default_factory=deque)
    changes: int = 0  # this pod's own transitions to open or closed (not those applied from other pods)

    def available(self, now: float) -> bool:
        """Could a request be sent now? (Does not take a probe slot.)"""
        if self.state == CLOSED:
            return True
        if self.state == OPEN:
            return now >= self.open_until
        return self.probes_out < self.policy.probes

    def acquire(self, now: float) -> bool:
        """Take permission to send one request; in half-open this takes a probe slot."""
        if self.state == OPEN and now >= self.open_until:
            self.state, self.probes_out, self.probe_successes = HALF_OPEN, 0, 0
        if self.state == CLOSED:
            return True
        if self.state == HALF_OPEN and self.probes_out < self.policy.probes:
            self.probes_out += 1
            return True
        return False

    def release(self) -> None:
        """An acquired request ended without saying anything about health (cancelled, 429, 400)."""
        if self.state == HALF_OPEN and self.probes_out > 0:
            self.probes_out -= 1

    def record(self, now: float, ok: bool) -> str | None:
        """Count one outcome of an acquired request; returns the new state if it changed."""
        if self.state == HALF_OPEN:
            self.probes_out = max(self.probes_out - 1, 0)
            if not ok:
                return self._open(now, min(max(self.cooldown_s * 2, self.policy.cooldown_s), self.policy.max_cooldown_s))
            self.probe_successes += 1
            if self.probe_successes >= self.policy.close_after:
                self._close()
                self.changes += 1
                return CLOSED
            return None
        if self.state == OPEN:  # a request sent before the circuit opened, ending now
            return None
        self._count(now, ok)
        requests, failures = self.totals(now)
        if requests >= self.policy.min_requests and failures * 100 > self.policy.error_pct * requests:
            return self._open(now, self.policy.cooldown_s)
        return None

    def open_remote(self, now: float, until: float, cooldown_s: float) -> bool:
        """Another pod opened the circuit until ``until`` (this pod's clock); True if it changed anything.

        A later end than the one held wins; an end already past is ignored.
        """
        if until <= now or (self.state == OPEN and self.open_until >= until):
            return False
        self.state, self.open_until, self.cooldown_s, self.opened_at = OPEN, until, cooldown_s, now
        self.probes_out = self.probe_successes = 0
        self.buckets.clear()
        return True

    def close_remote(self, closed_at: float) -> bool:
        """Another pod's probes closed the circuit at ``closed_at`` (this pod's clock): closes it here
        unless it opened again after that. True if it changed anything."""
        if self.state == CLOSED or (self.opened_at is not None and self.opened_at >= closed_at):
            return False
        self._close()
        return True

    def totals(self, now: float) -> tuple[int, int]:
        """(requests, failures) inside the window."""
        self._expire(now)
        return sum(b[1] for b in self.buckets), sum(b[2] for b in self.buckets)

    def _open(self, now: float, cooldown: float) -> str:
        self.state, self.cooldown_s, self.open_until = OPEN, cooldown, now + cooldown
        self.opened_at = now
        self.probes_out = self.probe_successes = 0
        self.buckets.clear()
        self.changes += 1
        return OPEN

    def _close(self) -> None:
        self.state, self.cooldown_s, self.opened_at = CLOSED, 0.0, None
        self.probes_out = self.probe_successes = 0
        self.buckets.clear()

    def _count(self, now: float, ok: bool) -> None:
        sec = int(now)
        if self.buckets and self.buckets[-1][0] == sec:
            _, req, fail = self.buckets[-1]
            self.buckets[-1] = (sec, req + 1, fail + (0 if ok else 1))
        else:
            self.buckets.append((sec, 1, 0 if ok else 1))
        self._expire(now)

    def _expire(self, now: float) -> None:
        horizon = now - self.policy.window_s
        while self.buckets and self.buckets[0][0] + 1 <= horizon:
            self.buckets.popleft()
