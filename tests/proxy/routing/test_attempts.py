"""Attempt decisions by error class, backoff, hedge delay, health."""

from __future__ import annotations

import random

from proxy.errors import UpstreamAuth, UpstreamRateLimited, UpstreamRejected, UpstreamUnavailable
from proxy.outcomes import FAILED, NEUTRAL, RATE_LIMITED
from proxy.routing.attempts import HEDGE_FLOOR_S, MAX_BACKOFF_S, backoff_s, hedge_delay_s, verdict
from proxy.routing.health import Health


def test_429_pauses_and_moves_on_without_counting_against_the_breaker() -> None:
    v = verdict(UpstreamRateLimited("full", retry_after=7))
    assert (v.outcome, v.retry, v.backoff, v.retry_after_s) == (RATE_LIMITED, True, False, 7)


def test_5xx_and_timeouts_retry_with_backoff() -> None:
    for exc in (UpstreamUnavailable("503"), UpstreamUnavailable("t", code="first_token_timeout")):
        v = verdict(exc)
        assert (v.outcome, v.retry, v.backoff) == (FAILED, True, True)


def test_rejections_and_auth_are_not_retried() -> None:
    assert verdict(UpstreamRejected("context length", code="context_length_exceeded")) == verdict(UpstreamRejected("x"))
    assert (verdict(UpstreamRejected("x")).outcome, verdict(UpstreamRejected("x")).retry) == (NEUTRAL, False)
    assert (verdict(UpstreamAuth("key")).outcome, verdict(UpstreamAuth("key")).retry) == (FAILED, False)


def test_backoff_is_full_jitter_and_capped() -> None:
    rng = random.Random(0)
    draws = [backoff_s(1, 0.1, rng) for _ in range(200)]
    assert 0 <= min(draws) and max(draws) <= 0.1 and max(draws) > 0.05
    assert max(backoff_s(10, 0.1, rng) for _ in range(200)) <= MAX_BACKOFF_S
    assert backoff_s(0, 0.1, rng) == 0.0


def test_hedge_delay_from_p95_or_fixed() -> None:
    h = Health()
    assert hedge_delay_s(None, h, 30) is None  # no TTFT history yet: do not guess
    for i in range(100):
        h.observe(float(i), True, ttft_s=0.1 + i / 1000)
    assert abs(hedge_delay_s(None, h, 30) - 0.194) < 1e-9  # the 95th of 100 samples
    assert hedge_delay_s(0.001, None, 30) == HEDGE_FLOOR_S
    assert hedge_delay_s(40.0, None, 30) is None  # after the first-token timeout: pointless


def test_health_factor_falls_with_errors_and_recovers_with_time() -> None:
    h = Health()
    for i in range(50):
        h.observe(i * 0.1, i % 3 != 0)  # a third fail
    assert h.factor(5.0, None) < 0.5
    assert h.factor(200.0, None) == 1.0  # errors decay
    slow = Health(ttft_ewma_s=2.0)
    assert slow.factor(0.0, 0.2) < 0.3


def test_a_content_filter_is_final_unless_the_alias_fails_over_on_it():
    policy = UpstreamRejected("filtered", code="content_policy_violation")
    assert not verdict(policy).retry and verdict(policy, True).retry
    assert not verdict(UpstreamRejected("bad temperature"), True).retry  # only the content filter
    assert verdict(policy, True).outcome == NEUTRAL  # another provider's filter is tried; no breaker blame
