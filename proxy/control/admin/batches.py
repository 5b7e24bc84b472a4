"""Admin API, batches across teams (``proxy.batches``):

    GET  /admin/v1/batches                    admin, finance, auditor   ?team=&status=&after=&limit=
    GET  /admin/v1/batches/{id}               admin, finance, auditor
    POST /admin/v1/batches/{id}/cancel        admin (audited)

Each batch as the Batch API shows it to its team, plus ``team``, ``key_id`` and ``x_farebox``: what its lines
cost so far, what they would have cost at the deployments' standard (interactive) prices and the difference
(``saved_micro``: the batch price's savings), and ``via`` (``gateway`` or ``provider``: who ran it) (the sum of what their answers said; the ``request.*`` events tagged ``fb.batch`` are the
record finance reconciles) in the budget currency. A cancel is the same as the team's own: lines not started
never run, lines in flight finish and are kept.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from pricing.money import to_decimal
from proxy.batches.objects import batch_object, list_object
from proxy.batches.records import CANCELLABLE, BatchRecord, BatchStore
from proxy.control.admin.access import allowed
from proxy.errors import GatewayError, InvalidRequest, NotFound
from proxy.runtime import RUNTIME, Runtime

STATUSES = ("in_progress", "cancelling", "completed", "failed", "expired", "cancelled")


def _store(rt: Runtime) -> BatchStore:
    if rt.batches is None:
        raise NotFound("Batches are not enabled on this gateway.", code="unknown_url")
    return rt.batches


def admin_view(rt: Runtime, record: BatchRecord) -> dict[str, Any]:
    return {**batch_object(record), "team": record.team, "key_id": record.key_id,
            "x_farebox": {"cost": str(to_decimal(record.counts.cost_micro)), "cost_micro": record.counts.cost_micro,
                          "list_cost_micro": record.counts.list_micro,
                          "saved_micro": record.counts.list_micro - record.counts.cost_micro,
                          "via": "provider" if record.provider is not None else "gateway",
                          "currency": rt.snapshot.currency}}


async def list_batches(request: web.Request) -> web.Response:
    await allowed(request, "", "", "finance", "auditor")
    rt, q = request.app[RUNTIME], request.query
    status = q.get("status")
    if status is not None and status not in STATUSES:
        raise InvalidRequest(f"status must be one of {list(STATUSES)}.", param="status")
    raw = q.get("limit", "100")
    if not raw.isdigit() or not 1 <= int(raw) <= 1000:
        raise InvalidRequest("limit must be an integer between 1 and 1000.", param="limit")
    limit = int(raw)
    found = await _store(rt).list_batches(q.get("team"), q.get("after"), limit + 1, status)
    return web.json_response(list_object([admin_view(rt, b) for b in found[:limit]], len(found) > limit))


async def _get(rt: Runtime, batch_id: str) -> BatchRecord:
    record = await _store(rt).get_batch(batch_id)
    if record is None:
        raise NotFound(f"No batch found with id '{batch_id}'.", param="batch_id", code="batch_not_found")
    return record


async def get_batch(request: web.Request) -> web.Response:
    await allowed(request, "", "", "finance", "auditor")
    rt = request.app[RUNTIME]
    return web.json_response(admin_view(rt, await _get(rt, request.match_info["id"])))


async def cancel_batch(request: web.Request) -> web.Response:
    batch_id = request.match_info["id"]
    token = await allowed(request, "batch.cancel", batch_id)
    rt = request.app[RUNTIME]
    record = await _get(rt, batch_id)
    if record.status not in CANCELLABLE:
        raise GatewayError(f"Cannot cancel a batch with status '{record.status}'.", status=409,
                           code="batch_not_cancellable")
    cancelled = await _store(rt).cancel(batch_id, int(rt.clock()))
    assert cancelled is not None
    rt.pod.wake_batches()
    if rt.control is not None:
        await rt.control.recorded(token.name, "batch.cancel", batch_id, {"status": cancelled.status,
                                                                          "team": cancelled.team})
    return web.json_response(admin_view(rt, cancelled))


def add_routes(app: web.Application) -> None:
    app.router.add_get("/admin/v1/batches", list_batches)
    app.router.add_get("/admin/v1/batches/{id}", get_batch)
    app.router.add_post("/admin/v1/batches/{id}/cancel", cancel_batch)
