"""Admin API, logged bodies: ``GET /admin/v1/bodies/{request_id}`` (role ``auditor`` only).

Every read is audited (``bodies.read`` on ``body:{request_id}``) before the
body is answered; a read that cannot be audited (no control store, config
database down) is refused, never served unaudited. Every other role, admin
included, gets a 403, audited as ``denied``. 404 when the request has no logged body (its team did
not opt in, it failed, it was a cache hit, or retention deleted it).
"""

from __future__ import annotations

from aiohttp import web

from proxy.control.admin.access import control
from proxy.errors import GatewayError, NotFound, PermissionDenied
from proxy.runtime import RUNTIME
from proxy.snapshot import AdminToken

ACTION = "bodies.read"


async def read_body(request: web.Request) -> web.Response:
    request_id = request.match_info["request_id"]
    obj = f"body:{request_id}"
    rt = request.app[RUNTIME]
    token: AdminToken = request["admin"]
    if token.role != "auditor":  # not even admin: reading bodies is the auditor's alone
        if rt.control is not None:
            await rt.control.denied(token.name, ACTION, obj)
        raise PermissionDenied(f"Admin token '{token.name}' has role '{token.role}'; only role 'auditor' reads "
                               "logged bodies.", code="insufficient_role")
    body_log = rt.body_log
    if body_log is None:
        raise GatewayError("Body logging is not configured on this gateway.", status=501, code="body_log_unavailable")
    await control(request).accessed(token.name, ACTION, obj)  # audited first: no audit row, no body
    found = await body_log.read(request_id)
    if found is None:
        raise NotFound(f"No logged body for request {request_id}.", code="body_not_found")
    return web.json_response(found)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/admin/v1/bodies/{request_id}", read_body)
