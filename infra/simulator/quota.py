"""A provider's per-minute quota for each account and model, and the rate-limit headers it answers with.

Fixed one-minute windows per (account, model), the limits from the model's profile (``rpm``, ``tpm``; 0: no
quota). ``take`` counts one request and its tokens (input plus the output cap asked for, as Azure and OpenAI
count a request against TPM) or, past the quota, raises a 429 ``RequestError``; either way the headers carry
what is left, in the wire's names: OpenAI's and Azure's ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``,
Anthropic's ``anthropic-ratelimit-{requests,input-tokens}-{limit,remaining,reset}``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from infra.simulator.config import ModelProfile
from infra.simulator.generation import RequestError

WINDOW_S = 60.0


@dataclass(slots=True)
class _Window:
    start: float
    requests: int = 0
    tokens: int = 0


class Quotas:
    def __init__(self) -> None:
        self._windows: dict[tuple[str, str], _Window] = {}

    def reset(self) -> None:
        self._windows.clear()

    def take(self, account: str, model: str, profile: ModelProfile, tokens: int, now: float,
             style: str) -> dict[str, str]:
        """Count one request of ``tokens``; the headers to answer with (none without a quota). Past the
        quota: ``RequestError`` 429 carrying them and ``retry-after``."""
        if not profile.rpm and not profile.tpm:
            return {}
        w = self._windows.get((account, model))
        if w is None or now - w.start >= WINDOW_S:
            w = self._windows[(account, model)] = _Window(now - now % WINDOW_S)
        reset = max(w.start + WINDOW_S - now, 0.0)
        over = (profile.rpm and w.requests + 1 > profile.rpm) or (profile.tpm and w.tokens + tokens > profile.tpm)
        if not over:
            w.requests += 1
            w.tokens += tokens
        headers = _headers(style, profile, w, reset, now)
        if over:
            err = RequestError(429, "rate_limit", f"Requests to {model} have exceeded the rate limit of your "
                                                  "current tier. Please retry after the window resets.")
            err.headers.update(headers)
            err.headers["retry-after"] = str(max(1, math.ceil(reset)))
            raise err
        return headers


def _headers(style: str, profile: ModelProfile, w: _Window, reset: float, now: float) -> dict[str, str]:
    left_requests = max(profile.rpm - w.requests, 0)
    left_tokens = max(profile.tpm - w.tokens, 0)
    out: dict[str, str] = {}
    if style == "anthropic":
        at = (datetime.fromtimestamp(now, timezone.utc) + timedelta(seconds=reset)).strftime("%Y-%m-%dT%H:%M:%SZ")
        if profile.rpm:
            out.update({"anthropic-ratelimit-requests-limit": str(profile.rpm),
                        "anthropic-ratelimit-requests-remaining": str(left_requests),
                        "anthropic-ratelimit-requests-reset": at})
        if profile.tpm:
            out.update({"anthropic-ratelimit-input-tokens-limit": str(profile.tpm),
                        "anthropic-ratelimit-input-tokens-remaining": str(left_tokens),
                        "anthropic-ratelimit-input-tokens-reset": at})
        return out
    if style != "openai":
        return out
    if profile.rpm:
        out.update({"x-ratelimit-limit-requests": str(profile.rpm),
                    "x-ratelimit-remaining-requests": str(left_requests),
                    "x-ratelimit-reset-requests": f"{math.ceil(reset)}s"})
    if profile.tpm:
        out.update({"x-ratelimit-limit-tokens": str(profile.tpm), "x-ratelimit-remaining-tokens": str(left_tokens),
                    "x-ratelimit-reset-tokens": f"{math.ceil(reset)}s"})
    return out
