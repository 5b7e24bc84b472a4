"""Rolling health of one deployment: error-rate and TTFT EWMAs, and a p95 TTFT.

The router scores by it (a deployment failing or slow gets less traffic
before its breaker opens) and hedging waits for the p95 TTFT. Pure: every
observation carries its time; the EWMAs decay with time, not with count, so a
quiet deployment's bad minute is forgotten at the same pace as a busy one's.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

HALF_LIFE_S = 10.0  # an error's weight halves every 10 s
TTFT_SAMPLES = 100


@dataclass
class Health:
    error_rate: float = 0.0
    ttft_ewma_s: float | None = None
    last: float | None = None
    ttfts: deque = field(default_factory=lambda: deque(maxlen=TTFT_SAMPLES))

    def observe(self, now: float, ok: bool, ttft_s: float | None = None) -> None:
        """One attempt's outcome (ok = no retryable failure) and, when it streamed, its TTFT."""
        self.error_rate = self._decayed(now) + _alpha(now, self.last) * ((0.0 if ok else 1.0) - self._decayed(now))
        self.last = now
        if ttft_s is not None:
            self.ttfts.append(ttft_s)
            self.ttft_ewma_s = ttft_s if self.ttft_ewma_s is None else 0.8 * self.ttft_ewma_s + 0.2 * ttft_s

    def _decayed(self, now: float) -> float:
        if self.last is None:
            return 0.0
        return self.error_rate * 0.5 ** (max(now - self.last, 0.0) / HALF_LIFE_S)

    def current_error_rate(self, now: float) -> float:
        return self._decayed(now)

    def p95_ttft_s(self) -> float | None:
        if len(self.ttfts) < 5:
            return None
        ordered = sorted(self.ttfts)
        return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]

    def factor(self, now: float, best_ttft_s: float | None) -> float:
        """Multiplier on the configured weight, in (0, 1]: errors and slowness lower it."""
        err = self._decayed(now)
        f = max(1.0 - err, 0.02) ** 4  # 10% errors -> 0.66, 30% -> 0.24
        if best_ttft_s is not None and self.ttft_ewma_s is not None:
            f *= min(max((best_ttft_s + 0.2) / (self.ttft_ewma_s + 0.2), 0.25), 1.0)
        # Coarse steps, so sticky sessions do not move on noise.
        return max(round(f, 1), 0.02) if f < 0.95 else 1.0


def _alpha(now: float, last: float | None) -> float:
    """Weight of the new observation: at least 5%, more after a long gap."""
    if last is None:
        return 0.1
    gap = max(now - last, 0.0)
    return max(0.05, 1.0 - 0.5 ** (gap / HALF_LIFE_S))
