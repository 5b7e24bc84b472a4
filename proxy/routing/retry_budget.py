"""Retries spent from a budget per alias, so failover never multiplies load.

Over a sliding window (one-second buckets), retries may be at most ``pct``
percent of the alias's requests, plus a small floor ``minimum`` so a quiet
alias can still fail over. A retry is any attempt after a request's first:
failover after an error, and a hedge. Pure: time is passed in.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class RetryBudget:
    pct: int = 10
    minimum: int = 10
    window_s: float = 10.0
    # (second, requests, retries), oldest first
    buckets: deque = field(default_factory=deque)

    def request(self, now: float) -> None:
        """Count one request (its first attempt)."""
        self._add(now, 1, 0)

    def allows(self, now: float) -> bool:
        """Would one more retry stay within the budget?"""
        requests, retries = self.totals(now)
        return (retries + 1) * 100 <= self.pct * requests + self.minimum * 100

    def spend(self, now: float) -> None:
        """Count one retry (after ``allows`` said yes)."""
        self._add(now, 0, 1)

    def try_spend(self, now: float) -> bool:
        """Take one retry if the budget allows it."""
        if not self.allows(now):
            return False
        self.spend(now)
        return True

    def totals(self, now: float) -> tuple[int, int]:
        """(requests, retries) inside the window."""
        horizon = now - self.window_s
        while self.buckets and self.buckets[0][0] + 1 <= horizon:
            self.buckets.popleft()
        return sum(b[1] for b in self.buckets), sum(b[2] for b in self.buckets)

    def _add(self, now: float, requests: int, retries: int) -> None:
        sec = int(now)
        if self.buckets and self.buckets[-1][0] == sec:
            _, r, t = self.buckets[-1]
            self.buckets[-1] = (sec, r + requests, t + retries)
        else:
            self.buckets.append((sec, requests, retries))
