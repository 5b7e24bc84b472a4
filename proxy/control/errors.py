"""Errors of the control plane (admin API, config database), each knowing its HTTP meaning.

Hierarchy (all ``proxy.errors.GatewayError``)::

    ConfigRejected (400)       validation before publish failed; ``problems`` lists every one
    ControlNotFound (404)      unknown key, alias, team, price version...
    ControlConflict (409)      e.g. a price version that exists (versions are never edited)
    ReviewedPathOnly (403)     a change the admin API may not make (a deployment's secret or base URL)
    ControlUnavailable (503)   the config database is unreachable; the pod keeps serving its snapshot
"""

from __future__ import annotations

from typing import Any

from proxy.errors import GatewayError, InvalidRequest, NotFound


class ConfigRejected(InvalidRequest):
    code = "config_rejected"

    def __init__(self, problems: list[str], what: str = "change") -> None:
        self.problems = list(problems)
        super().__init__(f"The {what} was rejected ({len(problems)} problem(s)): " + "; ".join(problems))

    def to_body(self) -> dict[str, Any]:
        body = super().to_body()
        body["error"]["problems"] = self.problems
        return body


class ControlNotFound(NotFound):
    code = "not_found"


class ControlConflict(GatewayError):
    status = 409
    type = "invalid_request_error"
    code = "conflict"


class ReviewedPathOnly(GatewayError):
    """A change only the reviewed config path (the config file and ``farebox config apply``) may make."""

    status = 403
    type = "permission_error"
    code = "reviewed_path_only"

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message, param=param)


class ControlUnavailable(GatewayError):
    status = 503
    type = "server_error"
    code = "control_unavailable"
    retryable = True
