"""Admin API, budgets: ``GET/PUT /admin/v1/budgets/{scope}``.

Reads come from the pod's budget port (the in-process ledger, or the worker's projection in distributed
mode) and snapshot; a PUT is validated against the
live snapshot with the same rules as the config file, then handed to the
control store, which persists it and swaps in the new snapshot before we
answer. Money in and out is a decimal string in the budget currency (plus
``*_micro`` integers); never a float.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from pricing.money import to_decimal
from proxy.body import parse_json_object
from proxy.control.admin.access import allowed, control
from proxy.control.admin.approvals import gated
from proxy.control.errors import ConfigRejected
from proxy.control.policies import budget_limit_from, check_scope, spend_scope_problem
from proxy.control.problems import Problems, Reader
from proxy.errors import GatewayError, InvalidRequest
from proxy.runtime import RUNTIME, Runtime


def _money(micro: int | None) -> str | None:
    return None if micro is None else str(to_decimal(micro))


async def budget_view(rt: Runtime, scope: str, period: str | None = None) -> dict[str, Any]:
    """The same shape in both modes; ``remaining`` is what is neither settled, held nor leased to a pod."""
    snap = rt.snapshot
    state = await rt.budgets.state(snap, scope, period, rt.clock())
    if state is None:
        raise GatewayError("Budgets are not readable on this pod.", status=501, code="budgets_unavailable")
    limit = snap.budgets.limit_for(scope)
    limit_micro = limit.limit_micro if limit else None
    remaining = None if limit_micro is None else limit_micro - state.settled - state.held - state.leased
    if limit_micro is None:
        status = "unlimited"
    elif remaining is not None and remaining <= 0:
        status = "exhausted"
    elif state.soft:
        status = "soft"
    else:
        status = "ok"
    return {
        "scope": scope,
        "period": state.period,
        "currency": snap.currency,
        "limit": _money(limit_micro),
        "limit_micro": limit_micro,
        "soft_pct": limit.soft_pct if limit else None,
        "downgrade_alias": limit.downgrade_alias if limit else None,
        "max_calls": limit.max_calls if limit else None,
        "spend_per_hour": _money(limit.spend_per_hour_micro) if limit else None,
        "settled": _money(state.settled),
        "settled_micro": state.settled,
        "held": _money(state.held),
        "held_micro": state.held,
        "leased": _money(state.leased),
        "leased_micro": state.leased,
        "overrun_micro": state.overrun,
        "requests": state.requests,
        "remaining": _money(remaining),
        "remaining_micro": remaining,
        "state": status,
    }


async def get_budget(request: web.Request) -> web.Response:
    await allowed(request, "", "", "finance", "auditor")
    rt = request.app[RUNTIME]
    period = request.query.get("period")
    if period is not None and (len(period) != 7 or period[4] != "-"):
        raise InvalidRequest("period must look like YYYY-MM.", param="period")
    return web.json_response(await budget_view(rt, request.match_info["scope"], period))


async def put_budget(request: web.Request) -> web.Response:
    scope = request.match_info["scope"]
    token = await allowed(request, "budgets.set", f"budget:{scope}", "finance")
    rt = request.app[RUNTIME]
    body = parse_json_object(await request.read())
    snap = rt.snapshot
    problems = Problems()
    if why := check_scope(scope, snap.teams, set(snap.business_units)):
        problems.add("scope", why)
    reader = Reader(body, "", problems)
    limit = budget_limit_from(reader, snap.aliases)
    reader.reject_unknown()
    if why := spend_scope_problem(scope, limit):
        problems.add("spend_per_hour", why)
    if problems.items:
        await control(request).rejected(token.name, "budgets.set", f"budget:{scope}", problems.items)
        raise ConfigRejected(problems.items, "budget")
    if proposed := await gated(request, token, "budgets.set", f"budget:{scope}", {"scope": scope, "body": body}):
        return proposed  # a raise past the threshold waits for a second person
    await control(request).set_budget(token.name, scope, body)
    return web.json_response(await budget_view(rt, scope))
