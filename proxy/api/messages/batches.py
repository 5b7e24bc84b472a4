"""Anthropic's Message Batches API on farebox's front door: ``POST /v1/messages/batches``,
``GET /v1/messages/batches``, ``GET /v1/messages/batches/{id}``, ``POST /v1/messages/batches/{id}/cancel``,
``GET /v1/messages/batches/{id}/results``, ``DELETE /v1/messages/batches/{id}``.

The same batches as the OpenAI Batch API's (``proxy.batches``; ``msgbatch_`` ids, endpoint ``/v1/messages``):
created with the requests inline, each line run by the gateways' batch runners through ``POST /v1/messages``
as the key that created the batch (admitted, metered, billed once, at batch priority); or, for an alias with
``batch_via: provider`` and an Anthropic deployment, admitted whole and sent as it is to Anthropic's Message
Batches, its results the provider's own Messages (``proxy.batches.provider_run``). What differs is the
shape: a ``message_batch`` object (``processing_status`` in_progress | canceling | ended, ``request_counts``
by result), and results as Anthropic's JSONL (``{"custom_id", "result": {"type": "succeeded", "message"}}``,
``errored`` with the error, ``canceled``, ``expired``), read from the lines' stored answers. Errors are
Anthropic-shaped (every ``/v1/messages`` path is). A batch is its team's (another team's id is a 404).
"""

from __future__ import annotations

import dataclasses
import re
import secrets
from datetime import datetime, timezone
from typing import Any

import orjson
from aiohttp import web

from proxy.api.batches import KIND, admit_whole, keep_batch, unusable_models
from proxy.api.files import store_of, visible_batch
from proxy.api.messages.request import to_chat, validate_messages
from proxy.batches import provider_money as money
from proxy.batches.lines import Line
from proxy.batches.objects import WINDOWS
from proxy.batches.provider_plan import chosen, plan
from proxy.batches.records import BatchRecord
from proxy.batches.reserve_run import admit_lines
from proxy.body import parse_json_object
from proxy.errors import GatewayError, InvalidRequest
from proxy.metering.settlement import scopes_of
from proxy.runtime import RUNTIME, Runtime

ENDPOINT = "/v1/messages"
_CUSTOM_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")
MAX_REQUESTS = 100_000


def _iso(ts: int | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def batch_object(r: BatchRecord, base: str) -> dict[str, Any]:
    ended = r.status in ("completed", "cancelled", "expired", "failed")
    status = "ended" if ended else ("canceling" if r.status == "cancelling" else "in_progress")
    c, t = r.counts, r.times
    unrun = c.total - c.completed - c.failed
    expired_unrun = unrun if r.status == "expired" else 0
    return {
        "id": r.id, "type": "message_batch", "processing_status": status,
        "request_counts": {"processing": 0 if ended else unrun, "succeeded": c.completed,
                           "errored": c.failed - expired_unrun if r.status == "expired" else c.failed,
                           "canceled": unrun if r.status == "cancelled" else 0, "expired": expired_unrun},
        "ended_at": _iso(t.get(f"{r.status}_at")) if ended else None, "created_at": _iso(r.created_at),
        "expires_at": _iso(r.expires_at), "archived_at": None, "cancel_initiated_at": _iso(t.get("cancelling_at")),
        "results_url": f"{base}/v1/messages/batches/{r.id}/results" if ended else None,
    }


def _native(params: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
    """A Messages line as its own request would be checked; its chat form (for the estimate) and output cap."""
    validate_messages(params)
    return to_chat(params), params.get("max_tokens")


def _lines(body: dict[str, Any], max_lines: int) -> list[Line]:
    requests = body.get("requests")
    if not isinstance(requests, list) or not requests:
        raise InvalidRequest("requests: a non-empty list of {custom_id, params} is required.", param="requests")
    if len(requests) > min(max_lines, MAX_REQUESTS):
        raise InvalidRequest(f"requests: at most {min(max_lines, MAX_REQUESTS)} requests in one batch.",
                             param="requests")
    seen: set[str] = set()
    lines = []
    for n, item in enumerate(requests):
        where = f"requests.{n}"
        if not isinstance(item, dict) or set(item) - {"custom_id", "params"}:
            raise InvalidRequest(f"{where}: each request is an object with custom_id and params only.", param=where)
        custom_id, params = item.get("custom_id"), item.get("params")
        if not isinstance(custom_id, str) or not _CUSTOM_ID.fullmatch(custom_id):
            raise InvalidRequest(f"{where}.custom_id: 1 to 64 letters, digits, '_' or '-'.", param=f"{where}.custom_id")
        if custom_id in seen:
            raise InvalidRequest(f"{where}.custom_id: each request needs its own custom_id.", param=f"{where}.custom_id")
        seen.add(custom_id)
        if not isinstance(params, dict) or not isinstance(params.get("model"), str) or not params["model"]:
            raise InvalidRequest(f"{where}.params: a Messages request naming a model.", param=f"{where}.params")
        if params.get("stream") is True:
            raise InvalidRequest(f"{where}.params.stream: a batch request is answered whole.",
                                 param=f"{where}.params.stream")
        lines.append(Line(n + 1, custom_id, params["model"], orjson.dumps(params)))
    return lines


async def create_batch(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    store_of(rt)  # (a 404 when the Files and Batches API is off)
    key = request["key"]
    body = parse_json_object(await request.read())
    lines = _lines(body, rt.options.batch_max_lines)
    problems = unusable_models(rt.pod.snapshot, key, lines, KIND[ENDPOINT])
    if problems:
        raise GatewayError(problems[0].message, status=403 if problems[0].code == "model_not_allowed" else 404,
                           code=problems[0].code, param=f"requests.{problems[0].line - 1}.params.model")
    now = int(rt.clock())
    record = BatchRecord(f"msgbatch_{secrets.token_hex(12)}", key.team, key.key_id, ENDPOINT, "", "24h",
                         "in_progress", now, now + WINDOWS["24h"], {}, [], {"in_progress_at": now})
    snap = rt.pod.snapshot
    alias = chosen(snap, key, ENDPOINT, lines, rt.options.provider_batches)
    if alias is not None:  # sent as it is to Anthropic's Message Batches, admitted whole (``proxy.batches.provider_run``)
        planned = plan(snap, key, alias, lines, rt.estimator, datetime.fromtimestamp(now, timezone.utc), _native)
        if isinstance(planned, list):
            first = planned[0]
            raise InvalidRequest(first.message, param=f"requests.{(first.line or 1) - 1}.params")
        record = dataclasses.replace(record, provider=money.block(
            snap, key, scopes_of(key, None), alias.name, planned.deployment, planned.price_version, planned.estimates,
            planned.hold_micro, planned.dearest_micro, native=True))
        await admit_whole(rt, key, record, snap)
    else:  # the gateway runs it: every line held now (``proxy.batches.reserve``)
        record, lines = await admit_lines(rt, key, record, snap, lines, WINDOWS["24h"], _native)
    await keep_batch(rt, record, lines)
    rt.pod.wake_batches()
    return await _answer(rt, request, record.id)


async def _visible(rt: Runtime, request: web.Request) -> BatchRecord:
    return await visible_batch(rt, request, (ENDPOINT,), what="message batch", param="message_batch_id")


async def _answer(rt: Runtime, request: web.Request, batch_id: str) -> web.Response:
    record = await store_of(rt).get_batch(batch_id)
    assert record is not None
    return web.json_response(batch_object(record, _base(request)))


def _base(request: web.Request) -> str:
    return f"{request.scheme}://{request.host}"


async def get_batch(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    return web.json_response(batch_object(await _visible(rt, request), _base(request)))


async def list_batches(request: web.Request) -> web.Response:
    rt, q = request.app[RUNTIME], request.query
    raw = q.get("limit", "20")
    if not raw.isdigit() or not 1 <= int(raw) <= 1000:
        raise InvalidRequest("limit: an integer between 1 and 1000.", param="limit")
    limit = int(raw)
    found = await store_of(rt).list_batches(request["key"].team, q.get("after_id"), limit + 1, endpoints=(ENDPOINT,))
    data = [batch_object(b, _base(request)) for b in found[:limit]]
    return web.json_response({"data": data, "has_more": len(found) > limit,
                              "first_id": data[0]["id"] if data else None, "last_id": data[-1]["id"] if data else None})


async def cancel_batch(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    record = await _visible(rt, request)
    if record.status == "in_progress":
        await store_of(rt).cancel(record.id, int(rt.clock()))
        rt.pod.wake_batches()
    return await _answer(rt, request, record.id)


async def delete_batch(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    record = await _visible(rt, request)
    if record.status in ("in_progress", "cancelling"):
        raise InvalidRequest("A message batch can be deleted once it has ended; cancel it first.", param="id")
    await store_of(rt).delete_batch(record.id)
    return web.json_response({"id": record.id, "type": "message_batch_deleted"})


async def results(request: web.Request) -> web.StreamResponse:
    rt = request.app[RUNTIME]
    record = await _visible(rt, request)
    if record.status in ("in_progress", "cancelling"):
        raise InvalidRequest(f"Message batch {record.id} has not ended yet; its results are not ready.",
                             param="id", code="results_not_ready")
    body = b"".join(orjson.dumps(result_line(custom_id, raw, record.status)) + b"\n"
                    for custom_id, raw in await store_of(rt).line_results(record.id))
    return web.Response(body=body, content_type="application/x-jsonl")


def result_line(custom_id: str, raw: bytes | None, final: str) -> dict[str, Any]:
    """Anthropic's result line from a line's stored answer (OpenAI's output-file line; None: never ran)."""
    if raw is None:
        kind = "expired" if final == "expired" else "canceled"
        return {"custom_id": custom_id, "result": {"type": kind}}
    answer = orjson.loads(raw).get("response") or {}
    body = answer.get("body")
    if answer.get("status_code") == 200 and isinstance(body, dict):
        return {"custom_id": custom_id, "result": {"type": "succeeded", "message": body}}
    error = body.get("error") if isinstance(body, dict) and isinstance(body.get("error"), dict) else {
        "type": "api_error", "message": "The request failed."}
    return {"custom_id": custom_id, "result": {"type": "errored", "error": {"type": "error", "error": error}}}


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/messages/batches", create_batch)
    app.router.add_get("/v1/messages/batches", list_batches)
    app.router.add_get("/v1/messages/batches/{id}", get_batch)
    app.router.add_delete("/v1/messages/batches/{id}", delete_batch)
    app.router.add_post("/v1/messages/batches/{id}/cancel", cancel_batch)
    app.router.add_get("/v1/messages/batches/{id}/results", results)
