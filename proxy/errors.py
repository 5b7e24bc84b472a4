"""Errors of the data plane, each knowing its HTTP meaning.

Hierarchy::

    GatewayError                      base: status, OpenAI type/code, param
      InvalidRequest (400)            malformed body, wrong field types
        UnsupportedParameter (400)    a parameter the deployment cannot honour
      AuthenticationFailed (401)      bad, unknown, expired or revoked key
      PermissionDenied (403)          alias not allowed, data class too high
      NotFound (404)                  unknown alias, unknown route
      PayloadTooLarge (413)
      RateLimited (429)               our own limits and budgets
        BudgetRefused (429)           a budget scope cannot fund the request (names the scope)
      UpstreamError                   what a provider answered, classified
        UpstreamRateLimited (429)     retryable, carries retry_after
        UpstreamUnavailable (502/503) 5xx, timeouts, connection errors
        UpstreamRejected (400)        bad request / context length / policy
        UpstreamAuth (502)            the provider refused *our* credentials
      EventLogUnavailable (503)       the event log refused to record the admission

    AttemptCut                        not an answer: why the gateway ended an attempt itself
      ClientGone, HedgeLost, Drained

Adapters turn provider and aiohttp exceptions into these at the boundary;
``to_body()`` is the OpenAI error shape every caller sees. Messages never
carry provider keys.
"""

from __future__ import annotations

from typing import Any

# On a batch line's refusal decided before its admission (nothing recorded under its request id): the batch
# runner runs the line again under the same id, with the hold its batch took for it (``proxy.batches.reserve``).
NOT_ADMITTED_HEADER = "x-fb-batch-unused"


class GatewayError(Exception):
    status = 500
    type = "server_error"
    code: str | None = "internal_error"
    retryable = False

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        status: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.param = param
        self.headers = dict(headers or {})

    def to_body(self) -> dict[str, Any]:
        return {
            "error": {
                "type": self.type,
                "code": self.code,
                "message": self.message,
                "param": self.param,
            }
        }


class InvalidRequest(GatewayError):
    status = 400
    type = "invalid_request_error"
    code = "invalid_request"


class UnsupportedParameter(InvalidRequest):
    code = "unsupported_parameter"

    def __init__(self, param: str, deployment: str, reason: str = "") -> None:
        detail = f": {reason}" if reason else ""
        super().__init__(
            f"Parameter '{param}' is not supported by deployment '{deployment}'{detail}.",
            param=param,
        )


class AuthenticationFailed(GatewayError):
    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"


class PermissionDenied(GatewayError):
    status = 403
    type = "invalid_request_error"
    code = "permission_denied"


class NotFound(GatewayError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


class PayloadTooLarge(GatewayError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class RateLimited(GatewayError):
    status = 429
    type = "rate_limit_error"
    code = "rate_limited"


class BudgetRefused(RateLimited):
    """A budget scope cannot fund the request: ``scope`` names it (for ``request.refused``).

    Final (``x-should-retry: false``, no Retry-After) unless ``retry_after_s`` is given: then the money
    is held by requests in flight and a retry after that many seconds may be funded."""

    def __init__(self, message: str, *, code: str, scope: str, retry_after_s: int | None = None) -> None:
        headers = ({"x-should-retry": "false"} if retry_after_s is None
                   else {"Retry-After": str(retry_after_s), "x-should-retry": "true"})
        super().__init__(message, code=code, headers=headers)
        self.scope = scope


def client_headers(exc: GatewayError) -> dict[str, str]:
    """The error's headers plus ``x-should-retry`` on every 4xx: true only with a Retry-After.

    The official SDKs retry 408/409/429 by themselves unless told; a final refusal tells them not to."""
    headers = dict(exc.headers)
    if 400 <= exc.status < 500 and "x-should-retry" not in headers:
        headers["x-should-retry"] = "true" if "Retry-After" in headers else "false"
    return headers


class UpstreamError(GatewayError):
    """A provider's answer or failure, classified for routing."""

    status = 502
    type = "api_error"
    code = "upstream_error"

    def __init__(self, message: str, *, upstream_status: int | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.upstream_status = upstream_status


class UpstreamRateLimited(UpstreamError):
    status = 429
    type = "rate_limit_error"
    code = "provider_capacity"
    retryable = True

    def __init__(self, message: str, *, retry_after: float | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after


class UpstreamUnavailable(UpstreamError):
    status = 503
    code = "provider_unavailable"
    retryable = True


class UpstreamRejected(UpstreamError):
    """The provider refused the request itself; retrying elsewhere won't help."""

    status = 400
    type = "invalid_request_error"
    code = "provider_rejected"


class UpstreamAuth(UpstreamError):
    status = 502
    code = "provider_auth_failed"


class EventLogUnavailable(GatewayError):
    """``request.admitted`` could not be recorded: nothing is served that the ledger cannot see."""

    status = 503
    code = "event_log_unavailable"
    retryable = True


class AttemptCut(Exception):
    """An attempt the gateway ended itself; metered as ``client_closed`` with this ``code``."""

    code = "cut"


class ClientGone(AttemptCut):
    """The caller disconnected mid-stream."""

    code = "client_gone"


class HedgeLost(AttemptCut):
    """A hedged attempt cancelled because another deployment answered first."""

    code = "hedge_lost"


class Drained(AttemptCut):
    """A stream ended by the pod's graceful drain deadline."""

    code = "drained"
