"""Admin API, config canaries (``proxy.control.rollout``):

    GET  /admin/v1/rollouts                     admin, auditor   the newest, with each arm's figures this stage
    POST /admin/v1/rollouts                     admin (audited)  arm one: {stages, window_s, thresholds, pods}
    POST /admin/v1/rollouts/{id}/{action}       admin (audited)  pause | resume | widen | rollback

An armed rollout starts when the next config version is published (any admin change or ``farebox config
apply``): that version is served to the slice, the rest keeps the version that was live when it was armed. A
rollback by hand publishes the baseline's routing again, like one taken by the thresholds.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from proxy.control import rollout_store as store
from proxy.control.admin.access import allowed
from proxy.errors import GatewayError, InvalidRequest
from proxy.runtime import RUNTIME

ACTIONS = ("pause", "resume", "widen", "rollback")


def _runner(request: web.Request) -> Any:
    runner = request.app[RUNTIME].pod.rollout_runner
    if runner is None:
        raise GatewayError("This pod has no config database: config canaries need one.", status=501,
                           code="control_unavailable")
    return runner


async def list_rollouts(request: web.Request) -> web.Response:
    await allowed(request, "", "", "auditor")
    runner = _runner(request)
    data = await asyncio.to_thread(store.listing, runner.db)
    return web.json_response({"object": "list", "data": data})


async def start_rollout(request: web.Request) -> web.Response:
    token = await allowed(request, "rollouts.start", "rollouts", "admin")
    runner = _runner(request)
    try:
        body = await request.json()
    except ValueError:
        raise InvalidRequest("The body must be a JSON object.", param="body") from None
    view = await asyncio.to_thread(store.start, runner.db, token.name, body)
    return web.json_response(view, status=201)


async def step_rollout(request: web.Request) -> web.Response:
    action = request.match_info["action"]
    if action not in ACTIONS:
        raise InvalidRequest(f"action must be one of {', '.join(ACTIONS)}, got {action!r}", param="action")
    try:
        rollout_id = int(request.match_info["id"])
    except ValueError:
        raise InvalidRequest("The rollout id is a whole number.", param="id") from None
    token = await allowed(request, f"rollouts.{action}", f"rollout:{rollout_id}", "admin")
    runner = _runner(request)
    await runner.by_hand(token.name, rollout_id, action)
    data = await asyncio.to_thread(store.listing, runner.db)
    return web.json_response(next(r for r in data if r["id"] == rollout_id))


def add_routes(app: web.Application) -> None:
    app.router.add_get("/admin/v1/rollouts", list_rollouts)
    app.router.add_post("/admin/v1/rollouts", start_rollout)
    app.router.add_post("/admin/v1/rollouts/{id}/{action}", step_rollout)
