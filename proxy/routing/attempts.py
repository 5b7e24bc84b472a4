"""What to do after an attempt fails, how long to back off, when to hedge. Pure.

| failure                                   | breaker / health | next step                       |
|-------------------------------------------|------------------|---------------------------------|
| 429                                       | not counted      | pause it for Retry-After, next  |
| 5xx, timeout, connection error, cut-off   | failure          | next, after a jittered backoff  |
| 400 (bad request, context length, policy) | not counted      | stop: the caller's answer       |
| 401/403 from the provider (our key)       | failure          | stop: the caller gets a 502     |

Retrying a 400 elsewhere just gets another 400; retrying a 429 at the same
deployment is a retry storm aimed at our own quota.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from proxy.errors import UpstreamAuth, UpstreamError, UpstreamRateLimited, UpstreamRejected
from proxy.outcomes import FAILED, NEUTRAL, RATE_LIMITED
from proxy.routing.health import Health

MAX_BACKOFF_S = 1.0
HEDGE_FLOOR_S = 0.05  # never hedge sooner: below this the second call is pure waste


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: str  # for RoutingState.finish
    retry: bool  # try the next candidate
    backoff: bool  # ... after a jittered pause
    retry_after_s: float | None = None


def verdict(exc: UpstreamError, content_filter_failover: bool = False) -> Verdict:
    """What one failed attempt means for routing: its outcome, whether to try again elsewhere, whether to back
    off. A rejection is final; with ``content_filter_failover`` (the alias's) a content-filter rejection is not."""
    if isinstance(exc, UpstreamRateLimited):
        return Verdict(RATE_LIMITED, True, False, exc.retry_after)
    if isinstance(exc, UpstreamRejected):
        return Verdict(NEUTRAL, content_filter_failover and exc.code == "content_policy_violation", False)
    if isinstance(exc, UpstreamAuth):
        return Verdict(FAILED, False, False)
    return Verdict(FAILED, exc.retryable, exc.retryable)


def backoff_s(retry: int, base_s: float, rng: random.Random) -> float:
    """Full jitter: uniform in [0, base * 2^(retry-1)], capped."""
    if base_s <= 0 or retry <= 0:
        return 0.0
    return rng.uniform(0.0, min(base_s * 2 ** (retry - 1), MAX_BACKOFF_S))


def hedge_delay_s(fixed_s: float | None, health: Health | None, first_token_timeout_s: float) -> float | None:
    """When to start a hedge: the alias's fixed delay, else the deployment's p95 TTFT; None = not yet known."""
    if fixed_s is not None:
        delay = fixed_s
    else:
        p95 = health.p95_ttft_s() if health is not None else None
        if p95 is None:
            return None
        delay = p95
    delay = max(delay, HEDGE_FLOOR_S)
    return delay if delay < first_token_timeout_s else None
