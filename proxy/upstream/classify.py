"""Turning a provider's failure into one of our ``UpstreamError`` classes.

Both dialects reduce an error (HTTP answer or in-stream error event) to a
status, the provider's short reason (error type/code) and its message, plus
two dialect-specific verdicts (context length, content policy); ``classify``
makes the one decision shared by all providers. Messages name the status and
reason; the provider's own text is passed on only for 4xx rejections (the
caller needs it to fix the request), scrubbed of anything key-shaped and
never for auth failures, where providers echo parts of the key.
"""

from __future__ import annotations

import math
import re
from typing import Mapping

import orjson

from proxy.errors import (
    UpstreamAuth,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamRejected,
    UpstreamUnavailable,
)

MAX_MESSAGE_CHARS = 500

# sk-..., sk-proj-..., sk-ant-api03-..., rk-..., Bearer tokens, AWS access key ids, Google API keys and tokens.
_KEYLIKE = re.compile(r"(?i)\b(?:sk|rk|pk)-[A-Za-z0-9_\-*.]{4,}|\bbearer\s+\S+"
                      r"|\b(?:AKIA|ASIA)[A-Z0-9]{12,}|\bAIza[0-9A-Za-z_\-]{20,}|\bya29\.[0-9A-Za-z_\-.]+")
_REASON = re.compile(r"[^A-Za-z0-9_.\-]")


def scrub(text: str) -> str:
    """Provider text made safe to show a caller: no key-like tokens, bounded length."""
    text = _KEYLIKE.sub("[redacted]", text).strip()
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 1] + "…"
    return text


def short_reason(value: object) -> str | None:
    """A provider error type/code as a bare identifier, or None."""
    if value is None or isinstance(value, (dict, list)):
        return None
    reason = _REASON.sub("", str(value))[:64]
    return reason or None


def load_json(body: bytes) -> dict:
    """The error body as a dict; {} when it is not JSON (an HTML 502 page, say)."""
    try:
        data = orjson.loads(body) if body else {}
    except orjson.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def header(headers: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive header lookup that works on plain dicts too."""
    value = headers.get(name)
    if value is not None:
        return value
    lname = name.lower()
    for key, val in headers.items():
        if key.lower() == lname:
            return val
    return None


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (delta-seconds only).

    An HTTP-date value is ignored: this module has no clock.
    """
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        raw = header(headers, name)
        if raw is None:
            continue
        try:
            value = float(raw.strip()) / scale
        except ValueError:
            continue
        if math.isfinite(value) and value >= 0:
            return value
    return None


def classify(
    provider: str,
    status: int,
    *,
    reason: str | None,
    message: str,
    headers: Mapping[str, str] | None = None,
    context_length: bool = False,
    policy: bool = False,
) -> UpstreamError:
    """The classified error for one provider failure.

    ``status`` is the HTTP status, or for an in-stream error event the status
    the provider documents for that error type; it becomes ``upstream_status``.
    """
    headers = headers or {}
    tag = f"HTTP {status}" + (f", {reason}" if reason else "")
    if status in (401, 402, 403):
        # 402 (billing) is, like auth, a problem with our account, not the request.
        return UpstreamAuth(
            f"Upstream ({provider}) refused the gateway's credentials or account ({tag}).",
            upstream_status=status,
        )
    if status == 429:
        return UpstreamRateLimited(
            f"Upstream ({provider}) is rate limiting this deployment ({tag}).",
            retry_after=retry_after(headers),
            upstream_status=status,
        )
    if status >= 500 or status < 400 or status in (404, 408, 409):
        # <400: a success status with an unusable body, or a redirect we do not
        # follow. 404: the deployment names a model or path the provider does not know,
        # a configuration fault another deployment may not share; 408/409 are
        # documented as retryable.
        return UpstreamUnavailable(
            f"Upstream ({provider}) is unavailable ({tag}).", upstream_status=status
        )
    detail = scrub(message)
    suffix = f": {detail}" if detail else "."
    if context_length:
        return UpstreamRejected(
            f"Upstream ({provider}) rejected the request: context length exceeded ({tag}){suffix}",
            code="context_length_exceeded",
            param="messages",
            upstream_status=status,
        )
    if policy:
        return UpstreamRejected(
            f"Upstream ({provider}) rejected the request under its content policy ({tag}){suffix}",
            code="content_policy_violation",
            upstream_status=status,
        )
    if status == 413:
        return UpstreamRejected(
            f"Upstream ({provider}) rejected the request as too large ({tag}){suffix}",
            code="request_too_large",
            upstream_status=status,
        )
    return UpstreamRejected(
        f"Upstream ({provider}) rejected the request ({tag}){suffix}", upstream_status=status
    )
