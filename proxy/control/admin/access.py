"""Who may call an admin route, and the control store the route writes through.

Every admin handler starts with ``allowed`` (the caller's token, its role
checked; a refusal is audited as ``denied`` and answers 403) and writes
through ``control`` (501 on a pod built without a control store).
"""

from __future__ import annotations

from aiohttp import web

from proxy.admission.auth import require_role
from proxy.errors import GatewayError, PermissionDenied
from proxy.ports import ControlStore
from proxy.runtime import RUNTIME
from proxy.snapshot import AdminToken


def control(request: web.Request) -> ControlStore:
    """The pod's control store (admin writes); 501 on a pod built without one."""
    svc = request.app[RUNTIME].control
    if svc is None:
        raise GatewayError("This pod has no control store for admin writes.", status=501, code="control_unavailable")
    return svc


async def allowed(request: web.Request, action: str, obj: str, *roles: str) -> AdminToken:
    """The caller's token if its role may do this; a refusal is audited (outcome ``denied``) and is a 403."""
    token: AdminToken = request["admin"]
    try:
        require_role(token, *roles)
    except PermissionDenied:
        svc = request.app[RUNTIME].control
        if svc is not None and action:
            await svc.denied(token.name, action, obj)
        raise
    return token
