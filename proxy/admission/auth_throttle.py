"""Failed-authentication throttling per source address: guessing keys or admin tokens costs time.

Each source (the peer address) has a token bucket of ``per_minute`` failures that refills continuously.
A failure takes one token; with none left the source is refused with 429 ``too_many_auth_failures`` and a
``Retry-After`` until one token has refilled, before its credentials are even looked at. A success costs
nothing and clears nothing (a valid key does not buy guesses for a neighbour on the same address).

Memory is bounded: at most ``max_sources`` sources are tracked; past that the least recently failed is
forgotten (a forgotten source starts again with a full bucket, the conservative choice for a bounded map).

Pure: the clock is passed in.
"""

from __future__ import annotations

import math
from collections import OrderedDict

from proxy.errors import GatewayError


class TooManyAuthFailures(GatewayError):
    status = 429
    type = "rate_limit_error"
    code = "too_many_auth_failures"


class AuthThrottle:
    __slots__ = ("per_minute", "max_sources", "_buckets")

    def __init__(self, per_minute: int = 30, max_sources: int = 10_000) -> None:
        self.per_minute = per_minute  # 0: no throttling
        self.max_sources = max_sources
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # source -> (tokens, at)

    def _tokens(self, source: str, now: float) -> float:
        tokens, at = self._buckets.get(source, (float(self.per_minute), now))
        return min(float(self.per_minute), tokens + (now - at) * self.per_minute / 60.0)

    def check(self, source: str, now: float) -> None:
        """Raise ``TooManyAuthFailures`` when ``source`` has no failure left to spend."""
        if self.per_minute <= 0 or source not in self._buckets:
            return
        tokens = self._tokens(source, now)
        if tokens < 1.0:
            wait = math.ceil((1.0 - tokens) * 60.0 / self.per_minute)
            raise TooManyAuthFailures(
                f"Too many failed authentications from this address; retry in {wait} s.",
                headers={"Retry-After": str(max(wait, 1))})

    def failed(self, source: str, now: float) -> None:
        """Spend one failure of ``source``."""
        if self.per_minute <= 0:
            return
        tokens = self._tokens(source, now)
        self._buckets[source] = (max(tokens - 1.0, 0.0), now)
        self._buckets.move_to_end(source)
        while len(self._buckets) > self.max_sources:
            self._buckets.popitem(last=False)

    def __len__(self) -> int:
        return len(self._buckets)
