"""The simulator's per-minute provider quota: what is left in each wire's headers, a 429 past it, a new window
each minute, nothing without a quota."""

from __future__ import annotations

import pytest

from infra.simulator.config import ModelProfile
from infra.simulator.generation import RequestError
from infra.simulator.quota import Quotas


def test_whats_left_is_told_and_past_the_quota_is_a_429() -> None:
    quotas, profile = Quotas(), ModelProfile(rpm=2, tpm=1_000)
    first = quotas.take("acct", "m", profile, 300, 120.0, "openai")
    assert first["x-ratelimit-remaining-requests"] == "1" and first["x-ratelimit-remaining-tokens"] == "700"
    assert first["x-ratelimit-limit-requests"] == "2" and first["x-ratelimit-reset-requests"] == "60s"
    quotas.take("acct", "m", profile, 300, 130.0, "openai")
    with pytest.raises(RequestError) as over:
        quotas.take("acct", "m", profile, 1, 150.0, "openai")
    assert over.value.status == 429 and over.value.headers["x-ratelimit-remaining-requests"] == "0"
    assert over.value.headers["retry-after"] == "30"
    assert quotas.take("other", "m", profile, 1, 150.0, "openai")["x-ratelimit-remaining-requests"] == "1"
    assert quotas.take("acct", "m", profile, 1, 181.0, "openai")["x-ratelimit-remaining-requests"] == "1"  # new minute


def test_anthropic_names_and_no_quota_no_headers() -> None:
    quotas = Quotas()
    told = quotas.take("acct", "m", ModelProfile(rpm=5, tpm=100), 40, 0.0, "anthropic")
    assert told["anthropic-ratelimit-requests-remaining"] == "4"
    assert told["anthropic-ratelimit-input-tokens-remaining"] == "60"
    assert told["anthropic-ratelimit-requests-reset"] == "1970-01-01T00:01:00Z"
    assert quotas.take("acct", "n", ModelProfile(), 40, 0.0, "openai") == {}
    with pytest.raises(RequestError):
        quotas.take("acct", "t", ModelProfile(tpm=10), 11, 0.0, "openai")
