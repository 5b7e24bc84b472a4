"""Admin API, the rest of the control plane: aliases, deployments, prices, teams, apps,
business units, admin tokens, the audit log and the live snapshot.

    GET /admin/v1/aliases | PUT /admin/v1/aliases/{name}              admin (reads: auditor); a provider new to
                                                                      the alias waits for a second admin
    GET /admin/v1/deployments | PUT /admin/v1/deployments/{id}        admin; a new deployment waits for a second
                                                                      admin; api_key_env and base_url never change here
    GET /admin/v1/prices | POST /admin/v1/prices | PUT /admin/v1/prices/v{n}   admin; a new version, never an edit
    GET /admin/v1/teams | PUT /admin/v1/teams/{name}                  admin ({business_unit, cost_centre, body_log})
    GET /admin/v1/apps | PUT /admin/v1/apps/{team}/{name}             admin ({cost_centre}: overrides the team's)
    GET /admin/v1/business-units | PUT /admin/v1/business-units/{name}   admin
    GET/POST /admin/v1/admin-tokens, POST /admin/v1/admin-tokens/{name}:revoke   admin; POST proposes (202), a
                                                                      second admin approves (``/admin/v1/changes``)
    GET /admin/v1/audit                                               auditor
    GET /admin/v1/snapshot                                            any role
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from aiohttp import web

from proxy.body import parse_json_object
from proxy.control.admin.access import allowed, control
from proxy.control.admin.approvals import gated
from proxy.control.alias_cache import semantic_view
from proxy.errors import InvalidRequest
from proxy.limits.draws import sequence_spec
from proxy.runtime import RUNTIME


async def _body(request: web.Request) -> dict[str, Any]:
    return parse_json_object(await request.read())


def _alias_view(a: Any) -> dict[str, Any]:
    return {"name": a.name, "kind": a.kind, "deployments": list(a.deployments), "needs": sorted(a.needs),
            "max_output_tokens": a.default_max_output_tokens, "max_output_tokens_cap": a.max_output_tokens_cap,
            "timeouts": {"connect_s": a.connect_timeout_s, "first_token_s": a.first_token_timeout_s,
                         "total_s": a.total_timeout_s, "capacity_wait_s": a.capacity_wait_s},
            "fallback_alias": a.fallback_alias,
            "cache": {"exact": a.cache, "semantic": semantic_view(a.semantic)}}


def _deployment_view(d: Any) -> dict[str, Any]:
    out = asdict(d)
    out["capabilities"] = sorted(d.capabilities)
    out["api_key_env"] = out.pop("secret_ref")  # the name of the secret, never its value
    if (team := out.pop("provisioned_team")) is not None:
        out["provisioned"] = {"team": team}  # the reservation's price is in the price versions
    return out


async def list_aliases(request: web.Request) -> web.Response:
    await allowed(request, "", "", "auditor")
    snap = request.app[RUNTIME].snapshot
    return web.json_response({"object": "list", "data": [_alias_view(a) for a in snap.aliases.values()]})


async def put_alias(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    token = await allowed(request, "aliases.put", f"alias:{name}", "admin")
    body = await _body(request)
    if proposed := await gated(request, token, "aliases.put", f"alias:{name}", {"name": name, "body": body}):
        return proposed  # routing to a provider new to the alias waits for a second admin
    return web.json_response(await control(request).put_alias(token.name, name, body))


async def list_deployments(request: web.Request) -> web.Response:
    await allowed(request, "", "", "auditor")
    rt = request.app[RUNTIME]
    snap, seen = rt.snapshot, rt.pod.deployment_status  # the synthetic canary's last word, when it runs
    data = []
    for d in snap.deployments.values():
        view = {**_deployment_view(d), "canary": seen[d.id].to_dict() if d.id in seen else None}
        seqs = sequence_spec(d)
        if seqs is not None:  # slots free now (the buckets this process counts with: shared ones in Redis)
            view["sequences_free"] = max(await rt.limits.peek(seqs, rt.now_us()), 0)
        data.append(view)
    return web.json_response({"object": "list", "data": data})


async def put_deployment(request: web.Request) -> web.Response:
    dep_id = request.match_info["id"]
    token = await allowed(request, "deployments.put", f"deployment:{dep_id}", "admin")
    body = await _body(request)
    allow = body.pop("allow_large_change", False) is True
    body.pop("canary", None)  # the synthetic canary's status in what GET lists: read-only, not config
    params = {"id": dep_id, "body": body, "allow_large_change": allow}
    if proposed := await gated(request, token, "deployments.put", f"deployment:{dep_id}", params):
        return proposed  # a new deployment waits for a second admin
    return web.json_response(await control(request).put_deployment(token.name, dep_id, body, allow))


async def list_prices(request: web.Request) -> web.Response:
    await allowed(request, "", "", "finance", "auditor")
    return web.json_response({"object": "list", "data": await control(request).list_prices()})


async def add_prices(request: web.Request) -> web.Response:
    raw = request.match_info.get("version")
    number = None
    if raw is not None:
        if not raw.startswith("v") or not raw[1:].isdigit():
            raise InvalidRequest("The price version in the path must look like v18.", param="version")
        number = int(raw[1:])
    token = await allowed(request, "prices.add", f"prices:{raw or 'next'}", "admin")
    return web.json_response(await control(request).add_prices(token.name, await _body(request), number), status=201)


async def list_teams(request: web.Request) -> web.Response:
    await allowed(request, "", "", "finance", "auditor")
    snap = request.app[RUNTIME].snapshot
    return web.json_response({"object": "list", "data": [
        {"name": t.name, "business_unit": t.business_unit, "cost_centre": t.cost_centre, "body_log": t.body_log}
        for t in snap.teams.values()]})


async def put_team(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    token = await allowed(request, "teams.put", f"team:{name}", "admin")
    return web.json_response(await control(request).put_team(token.name, name, await _body(request)))


async def list_apps(request: web.Request) -> web.Response:
    await allowed(request, "", "", "finance", "auditor")
    snap = request.app[RUNTIME].snapshot
    return web.json_response({"object": "list", "data": [
        {"team": a.team, "name": a.name, "cost_centre": a.cost_centre,
         "allocated_to": snap.cost_centre_of(a.team, a.name)} for a in snap.apps.values()]})


async def put_app(request: web.Request) -> web.Response:
    team, name = request.match_info["team"], request.match_info["name"]
    token = await allowed(request, "apps.put", f"app:{team}/{name}", "admin")
    return web.json_response(await control(request).put_app(token.name, team, name, await _body(request)))


async def list_business_units(request: web.Request) -> web.Response:
    await allowed(request, "", "", "finance", "auditor")
    snap = request.app[RUNTIME].snapshot
    return web.json_response({"object": "list", "data": [{"name": n} for n in sorted(snap.business_units)]})


async def put_business_unit(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    token = await allowed(request, "business_units.put", f"bu:{name}", "admin")
    return web.json_response(await control(request).put_business_unit(token.name, name))


async def list_admin_tokens(request: web.Request) -> web.Response:
    await allowed(request, "", "", "auditor")
    return web.json_response({"object": "list", "data": await control(request).list_admin_tokens()})


async def create_admin_token(request: web.Request) -> web.Response:
    token = await allowed(request, "admin_tokens.create", "admin_token", "admin")
    body = await _body(request)
    name, role = body.get("name"), body.get("role")
    if not isinstance(name, str) or not name or not isinstance(role, str):
        raise InvalidRequest("Give a name and a role (admin, finance or auditor).", param="name")
    proposed = await gated(request, token, "admin_tokens.create", f"admin_token:{name}", {"name": name, "role": role})
    assert proposed is not None  # every token takes two admins: the approver receives it (``/changes/{id}:approve``)
    return proposed


async def revoke_admin_token(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    token = await allowed(request, "admin_tokens.revoke", f"admin_token:{name}", "admin")
    return web.json_response(await control(request).revoke_admin_token(token.name, name))


async def get_audit(request: web.Request) -> web.Response:
    await allowed(request, "", "", "auditor")
    try:
        limit = min(int(request.query.get("limit", "100")), 1000)
    except ValueError:
        raise InvalidRequest("limit must be an integer.", param="limit") from None
    rows = await control(request).audit(limit, request.query.get("object"))
    return web.json_response({"object": "list", "data": rows})


async def get_snapshot(request: web.Request) -> web.Response:
    await allowed(request, "", "", "finance", "auditor")
    rt = request.app[RUNTIME]
    status = rt.control.snapshot_status() if rt.control is not None else {}
    return web.json_response({**status, "version": rt.snapshot.version, "content_hash": rt.snapshot.content_hash})


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get("/admin/v1/aliases", list_aliases)
    r.add_put("/admin/v1/aliases/{name}", put_alias)
    r.add_get("/admin/v1/deployments", list_deployments)
    r.add_put("/admin/v1/deployments/{id}", put_deployment)
    r.add_get("/admin/v1/prices", list_prices)
    r.add_post("/admin/v1/prices", add_prices)
    r.add_put("/admin/v1/prices/{version}", add_prices)
    r.add_get("/admin/v1/teams", list_teams)
    r.add_put("/admin/v1/teams/{name}", put_team)
    r.add_get("/admin/v1/apps", list_apps)
    r.add_put("/admin/v1/apps/{team}/{name}", put_app)
    r.add_get("/admin/v1/business-units", list_business_units)
    r.add_put("/admin/v1/business-units/{name}", put_business_unit)
    r.add_get("/admin/v1/admin-tokens", list_admin_tokens)
    r.add_post("/admin/v1/admin-tokens", create_admin_token)
    r.add_post("/admin/v1/admin-tokens/{name:[^/:]+}:revoke", revoke_admin_token)
    r.add_get("/admin/v1/audit", get_audit)
    r.add_get("/admin/v1/snapshot", get_snapshot)
