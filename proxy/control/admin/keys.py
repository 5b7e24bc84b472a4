"""Admin API, virtual keys: create (shown once), list, revoke, rotate with overlap.

    GET  /admin/v1/keys                      admin, auditor
    POST /admin/v1/keys                      admin        -> 201, the key in the answer only
    POST /admin/v1/keys/{id}:revoke          admin        -> live on every pod at its next poll
    POST /admin/v1/keys/{id}:rotate          admin        body {overlap_s}: old and new valid meanwhile

A key may be pinned: ``regions`` (residency: its requests are served only by
deployments in these regions, refused rather than sent abroad) and
``deployments`` (only these deployment ids); empty or absent means no
restriction. Rotation carries both over unless the body gives new ones.
"""

from __future__ import annotations

from aiohttp import web

from proxy.body import parse_json_object
from proxy.control.admin.access import allowed, control
from proxy.control.changes import rotate_spec
from proxy.errors import InvalidRequest


async def list_keys(request: web.Request) -> web.Response:
    await allowed(request, "", "", "auditor")
    return web.json_response({"object": "list", "data": await control(request).list_keys()})


async def create_key(request: web.Request) -> web.Response:
    token = await allowed(request, "keys.create", "key", "admin")
    body = parse_json_object(await request.read())
    view, plaintext = await control(request).create_key(token.name, body)
    return web.json_response({**view, "key": plaintext, "note": "shown once; only its hash is stored"}, status=201)


async def revoke_key(request: web.Request) -> web.Response:
    key_id = request.match_info["key_id"]
    token = await allowed(request, "keys.revoke", f"key:{key_id}", "admin")
    return web.json_response(await control(request).revoke_key(token.name, key_id))


async def rotate_key(request: web.Request) -> web.Response:
    key_id = request.match_info["key_id"]
    token = await allowed(request, "keys.rotate", f"key:{key_id}", "admin")
    raw = await request.read()
    body = parse_json_object(raw) if raw.strip() else {}
    overlap = body.get("overlap_s", 3600)
    if isinstance(overlap, bool) or not isinstance(overlap, (int, float)) or overlap < 0:
        raise InvalidRequest("overlap_s must be a number of seconds >= 0.", param="overlap_s")
    pins = rotate_spec(body)
    after, plaintext = await control(request).rotate_key(token.name, key_id, float(overlap), pins)
    return web.json_response({**after, "key": plaintext, "note": "shown once; only its hash is stored"}, status=201)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/admin/v1/keys", list_keys)
    app.router.add_post("/admin/v1/keys", create_key)
    app.router.add_post("/admin/v1/keys/{key_id:[^/:]+}:revoke", revoke_key)
    app.router.add_post("/admin/v1/keys/{key_id:[^/:]+}:rotate", rotate_key)
