"""The admin API under ``/admin/v1/``: one module per resource, each with its handlers and ``add_routes``.

``add_routes`` mounts them all; the composition root calls it (the HTTP app of ``proxy/api/`` knows nothing of
the control plane). Every handler starts with ``access.allowed`` (token, role, audit of a refusal).
"""

from __future__ import annotations

from aiohttp import web

from proxy.control.admin import approvals, batches, bodies, budgets, config, keys, load, rerate, rollouts, usage


def add_routes(app: web.Application) -> None:
    app.router.add_get("/admin/v1/budgets/{scope}", budgets.get_budget)
    app.router.add_put("/admin/v1/budgets/{scope}", budgets.put_budget)
    keys.add_routes(app)
    config.add_routes(app)
    usage.add_routes(app)
    bodies.add_routes(app)
    rerate.add_routes(app)
    approvals.add_routes(app)
    load.add_routes(app)
    batches.add_routes(app)
    rollouts.add_routes(app)
