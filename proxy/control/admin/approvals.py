"""Admin API: changes that wait for a second person (``proxy.control.approvals``).

    GET  /admin/v1/changes[?status=pending]          admin, finance, auditor
    POST /admin/v1/changes/{id}:approve              a different admin (finance too for a budget)
    POST /admin/v1/changes/{id}:reject               admin, finance

``gated`` is what the other handlers call before a change: when the change needs a second person it is
stored as a proposal and answered with 202 and the pending change; otherwise None and the handler goes on.
"""

from __future__ import annotations

from typing import Any, Mapping

from aiohttp import web

from proxy.control.admin.access import allowed, control
from proxy.errors import InvalidRequest
from proxy.runtime import RUNTIME
from proxy.snapshot import AdminToken

STATUSES = ("pending", "approving", "approved", "failed", "rejected", "expired")


async def gated(request: web.Request, token: AdminToken, action: str, obj: str,
                params: Mapping[str, Any]) -> web.Response | None:
    """202 with the stored proposal when this change takes two people; None when the caller may make it alone."""
    svc = control(request)
    reason = svc.needs_approval(action, params, request.app[RUNTIME].snapshot)
    if reason is None:
        return None
    return web.json_response(await svc.propose(token.name, action, obj, params, reason), status=202)


def _change_id(request: web.Request) -> int:
    raw = request.match_info["id"]
    if not raw.isdigit():
        raise InvalidRequest(f"Change id must be a number, got {raw!r}.", param="id")
    return int(raw)


async def list_changes(request: web.Request) -> web.Response:
    await allowed(request, "", "", "admin", "finance", "auditor")
    status = request.query.get("status")
    if status is not None and status not in STATUSES:
        raise InvalidRequest(f"status must be one of {list(STATUSES)}, got {status!r}.", param="status")
    return web.json_response({"object": "list", "data": await control(request).list_changes(status)})


async def approve_change(request: web.Request) -> web.Response:
    change_id = _change_id(request)
    token = await allowed(request, "changes.approve", f"change:{change_id}", "admin", "finance")
    return web.json_response(await control(request).approve(token.name, token.role, change_id))


async def reject_change(request: web.Request) -> web.Response:
    change_id = _change_id(request)
    token = await allowed(request, "changes.reject", f"change:{change_id}", "admin", "finance")
    return web.json_response(await control(request).reject(token.name, change_id))


def add_routes(app: web.Application) -> None:
    app.router.add_get("/admin/v1/changes", list_changes)
    app.router.add_post("/admin/v1/changes/{id:[^/:]+}:approve", approve_change)
    app.router.add_post("/admin/v1/changes/{id:[^/:]+}:reject", reject_change)
