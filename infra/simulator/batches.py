"""The providers' batch APIs, as the simulator serves them: OpenAI's Files and Batch API and Anthropic's Message
Batches, on one engine.

OpenAI: ``POST /v1/files`` (multipart ``file`` and ``purpose``: ``batch``), ``GET /v1/files/{id}``,
``GET /v1/files/{id}/content``, ``DELETE /v1/files/{id}``; ``POST /v1/batches`` (``input_file_id``,
``endpoint``: ``/v1/chat/completions``, ``completion_window``: ``24h``), ``GET /v1/batches/{id}``,
``POST /v1/batches/{id}/cancel``, ``GET /v1/batches`` (with each batch's ``metadata``). Statuses ``validating`` -> ``in_progress`` -> ``finalizing`` -> ``completed``,
or ``cancelling`` -> ``cancelled`` (the lines answered before the cancel are in the output file), ``expired``.
Anthropic: ``POST /v1/messages/batches`` (``requests``: ``[{custom_id, params}]``), ``GET
/v1/messages/batches/{id}``, ``GET /v1/messages/batches/{id}/results`` (JSONL, once ended),
``POST /v1/messages/batches/{id}/cancel``; ``processing_status`` ``in_progress`` -> ``canceling`` -> ``ended``.

A batch runs in the background, its lines one after another, each taking its model's ``batch_line_ms``: every
line is answered by the same planner as a synchronous request (no faults drawn: a provider's batch retries its
own transient failures) and billed once, at tier ``batch`` (the providers' 50% discount is the price book's
business; the export shows the batch's tokens as rows of their own). A line the model would refuse (bad
parameters, context too long) is an error line, not billed. The batch's 24 h window is kept: lines left when it
passes are ``expired`` (``x-sim-batch-window-s`` on the create shortens it for tests).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from types import ModuleType
from typing import Any

import orjson
from aiohttp import web

from infra.simulator import anthropic_wire, openai_wire
from infra.simulator.batch_store import SimBatch
from infra.simulator.generation import Overrides, RequestError, plan_chat
from infra.simulator.state import STATE, SimState

WINDOW_S = 86_400
TASKS = web.AppKey("sim_batch_tasks", set)


def _json(data: object, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(data), content_type="application/json", headers=headers)


def _error(wire: ModuleType, status: int, kind: str, message: str) -> web.Response:
    return web.Response(status=status, body=wire.error_body(RequestError(status, kind, message)),
                        content_type="application/json")


async def _account(request: web.Request, wire: ModuleType) -> str | web.Response:
    account = request.app[STATE].account_for(wire.api_key(request.headers))
    if account is None:
        err = wire.auth_error(missing=not wire.api_key(request.headers))
        return web.Response(status=err.status, body=wire.error_body(err), content_type="application/json")
    return account


# OpenAI: files


def _file_object(file_id: str, purpose: str, content: bytes, name: str) -> dict[str, Any]:
    return {"id": file_id, "object": "file", "bytes": len(content), "created_at": int(time.time()),
            "filename": name, "purpose": purpose, "status": "processed"}


async def create_file(request: web.Request) -> web.Response:
    account = await _account(request, openai_wire)
    if isinstance(account, web.Response):
        return account
    form = await request.post()
    upload, purpose = form.get("file"), form.get("purpose")
    if not isinstance(upload, web.FileField) or purpose not in ("batch", "batch_output"):
        return _error(openai_wire, 400, "invalid_request", "A file and purpose 'batch' are required.")
    content = upload.file.read()
    file_id = f"file-sim{uuid.uuid4().hex[:20]}"
    request.app[STATE].batches.files[file_id] = (account, str(purpose), content)
    return _json(_file_object(file_id, str(purpose), content, upload.filename or "input.jsonl"))


def _own_file(request: web.Request, account: str) -> tuple[str, str, bytes] | None:
    found = request.app[STATE].batches.files.get(request.match_info["file_id"])
    return found if found is not None and found[0] == account else None


async def file_content(request: web.Request) -> web.Response:
    account = await _account(request, openai_wire)
    if isinstance(account, web.Response):
        return account
    found = _own_file(request, account)
    if found is None:
        return _error(openai_wire, 404, "not_found", "No such file.")
    return web.Response(body=found[2], content_type="application/octet-stream")


async def delete_file(request: web.Request) -> web.Response:
    account = await _account(request, openai_wire)
    if isinstance(account, web.Response):
        return account
    if _own_file(request, account) is None:
        return _error(openai_wire, 404, "not_found", "No such file.")
    del request.app[STATE].batches.files[request.match_info["file_id"]]
    return _json({"id": request.match_info["file_id"], "object": "file", "deleted": True})


# OpenAI: batches


def _openai_batch(b: SimBatch) -> dict[str, Any]:
    done = sum(1 for _, ok, _ in b.results if ok)
    return {"id": b.id, "object": "batch", "endpoint": "/v1/chat/completions", "errors": None,
            "input_file_id": b.input_file_id, "completion_window": "24h", "status": b.status,
            "output_file_id": b.output_file_id, "error_file_id": b.error_file_id, "created_at": b.created_at,
            "in_progress_at": b.created_at, "expires_at": b.expires_at, **{f"{k}_at": v for k, v in b.times.items()},
            "request_counts": {"total": len(b.lines), "completed": done, "failed": len(b.results) - done},
            "metadata": b.metadata}


def _window(request: web.Request) -> int:
    raw = request.headers.get("x-sim-batch-window-s")
    return int(raw) if raw is not None and raw.isdigit() else WINDOW_S


async def create_openai_batch(request: web.Request) -> web.Response:
    account = await _account(request, openai_wire)
    if isinstance(account, web.Response):
        return account
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        return _error(openai_wire, 400, "invalid_request", "The request body is not valid JSON.")
    state = request.app[STATE]
    state.received.record(request.path, body)
    found = state.batches.files.get(body.get("input_file_id")) if isinstance(body, dict) else None
    if found is None or found[0] != account:
        return _error(openai_wire, 400, "invalid_request", "input_file_id names no file of this account.")
    if body.get("endpoint") != "/v1/chat/completions" or body.get("completion_window") != "24h":
        return _error(openai_wire, 400, "invalid_request",
                      "endpoint must be /v1/chat/completions and completion_window 24h.")
    meta = body.get("metadata")
    lines: list[tuple[str, dict]] = []
    for n, raw in enumerate(found[2].splitlines(), 1):
        try:
            line = orjson.loads(raw)
            lines.append((str(line["custom_id"]), dict(line["body"])))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return _error(openai_wire, 400, "invalid_request", f"Line {n} of the input file is not a batch request.")
    now = int(time.time())
    batch = SimBatch(f"batch_sim{uuid.uuid4().hex[:20]}", account, openai_wire, lines, now, now + _window(request),
                     input_file_id=body["input_file_id"], metadata=meta if isinstance(meta, dict) else None)
    _start(request.app, state, batch)
    return _json(_openai_batch(batch))


async def list_openai_batches(request: web.Request) -> web.Response:
    """The account's batches, newest first (``limit``, at most 100)."""
    account = await _account(request, openai_wire)
    if isinstance(account, web.Response):
        return account
    raw = request.query.get("limit", "20")
    limit = min(100, int(raw)) if raw.isdigit() and int(raw) > 0 else 20
    mine = [b for b in request.app[STATE].batches.batches.values() if b.account == account and b.wire is openai_wire]
    mine.sort(key=lambda b: b.created_at, reverse=True)
    data = [_openai_batch(b) for b in mine[:limit]]
    return _json({"object": "list", "data": data, "has_more": len(mine) > limit})


def _own_batch(request: web.Request, account: str) -> SimBatch | None:
    batch = request.app[STATE].batches.batches.get(request.match_info["batch_id"])
    return batch if batch is not None and batch.account == account else None


async def get_openai_batch(request: web.Request) -> web.Response:
    account = await _account(request, openai_wire)
    if isinstance(account, web.Response):
        return account
    batch = _own_batch(request, account)
    if batch is None or batch.wire is not openai_wire:
        return _error(openai_wire, 404, "not_found", "No such batch.")
    return _json(_openai_batch(batch))


async def cancel_openai_batch(request: web.Request) -> web.Response:
    account = await _account(request, openai_wire)
    if isinstance(account, web.Response):
        return account
    batch = _own_batch(request, account)
    if batch is None or batch.wire is not openai_wire:
        return _error(openai_wire, 404, "not_found", "No such batch.")
    _cancel(batch)
    return _json(_openai_batch(batch))


# Anthropic: message batches


def _anthropic_batch(b: SimBatch, request: web.Request) -> dict[str, Any]:
    status = {"cancelling": "canceling", "in_progress": "in_progress"}.get(b.status, "ended")
    ok = sum(1 for _, good, _ in b.results if good)
    counts = {"processing": len(b.lines) - len(b.results) if status != "ended" else 0, "succeeded": ok,
              "errored": len(b.results) - ok, "canceled": 0, "expired": 0}
    if status == "ended":
        left = len(b.lines) - len(b.results)
        counts["canceled" if b.status == "cancelled" else "expired"] = left
    iso = lambda t: None if t is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))  # noqa: E731
    return {"id": b.id, "type": "message_batch", "processing_status": status, "request_counts": counts,
            "ended_at": iso(b.times.get("completed") or b.times.get("cancelled") or b.times.get("expired")),
            "created_at": iso(b.created_at), "expires_at": iso(b.expires_at),
            "cancel_initiated_at": iso(b.times.get("cancelling")), "archived_at": None,
            "results_url": f"{request.scheme}://{request.host}/v1/messages/batches/{b.id}/results"
            if status == "ended" else None}


async def create_anthropic_batch(request: web.Request) -> web.Response:
    account = await _account(request, anthropic_wire)
    if isinstance(account, web.Response):
        return account
    try:
        body = orjson.loads(await request.read())
        request.app[STATE].received.record(request.path, {"requests": len(body.get("requests") or [])})
        lines = [(str(r["custom_id"]), dict(r["params"])) for r in body["requests"]]
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return _error(anthropic_wire, 400, "invalid_request", "requests: a list of {custom_id, params} is required.")
    if not lines:
        return _error(anthropic_wire, 400, "invalid_request", "requests: at least one request is required.")
    now = int(time.time())
    batch = SimBatch(f"msgbatch_sim{uuid.uuid4().hex[:20]}", account, anthropic_wire, lines, now,
                     now + _window(request))
    _start(request.app, request.app[STATE], batch)
    return _json(_anthropic_batch(batch, request))


async def get_anthropic_batch(request: web.Request) -> web.Response:
    account = await _account(request, anthropic_wire)
    if isinstance(account, web.Response):
        return account
    batch = _own_batch(request, account)
    if batch is None or batch.wire is not anthropic_wire:
        return _error(anthropic_wire, 404, "not_found", "No such message batch.")
    return _json(_anthropic_batch(batch, request))


async def cancel_anthropic_batch(request: web.Request) -> web.Response:
    account = await _account(request, anthropic_wire)
    if isinstance(account, web.Response):
        return account
    batch = _own_batch(request, account)
    if batch is None or batch.wire is not anthropic_wire:
        return _error(anthropic_wire, 404, "not_found", "No such message batch.")
    _cancel(batch)
    return _json(_anthropic_batch(batch, request))


async def anthropic_results(request: web.Request) -> web.Response:
    account = await _account(request, anthropic_wire)
    if isinstance(account, web.Response):
        return account
    batch = _own_batch(request, account)
    if batch is None or batch.wire is not anthropic_wire:
        return _error(anthropic_wire, 404, "not_found", "No such message batch.")
    if batch.status in ("in_progress", "cancelling"):
        return _error(anthropic_wire, 400, "invalid_request", "The batch has not ended; its results are not ready.")
    out = []
    for custom_id, ok, body in batch.results:
        result = {"type": "succeeded", "message": body} if ok else {"type": "errored", "error": body}
        out.append(orjson.dumps({"custom_id": custom_id, "result": result}))
    final = "canceled" if batch.status == "cancelled" else "expired"
    for custom_id, _ in batch.lines[len(batch.results):]:
        out.append(orjson.dumps({"custom_id": custom_id, "result": {"type": final}}))
    return web.Response(body=b"\n".join(out) + b"\n", content_type="application/binary")


# the engine


def _start(app: web.Application, state: SimState, batch: SimBatch) -> None:
    state.batches.batches[batch.id] = batch
    task = asyncio.get_running_loop().create_task(_run(state, batch))
    app[TASKS].add(task)
    task.add_done_callback(app[TASKS].discard)


def _cancel(batch: SimBatch) -> None:
    if batch.status == "in_progress":
        batch.status = "cancelling"
        batch.times["cancelling"] = int(time.time())


async def _run(state: SimState, batch: SimBatch) -> None:
    for custom_id, body in batch.lines:
        if batch.status != "in_progress" or time.time() >= batch.expires_at:
            break
        model = str(body.get("model", "unknown"))
        await asyncio.sleep(state.profile(model).batch_line_ms / 1000)
        if batch.status != "in_progress":
            break
        batch.results.append((custom_id, *_answer(state, batch, model, body)))
    final = {"in_progress": "completed", "cancelling": "cancelled"}[batch.status]
    if final == "completed" and len(batch.results) < len(batch.lines):
        final = "expired"
    if batch.wire is openai_wire:
        _files(state, batch)
    batch.status = final
    batch.times[final] = int(time.time())


def _answer(state: SimState, batch: SimBatch, model: str, body: dict) -> tuple[bool, dict]:
    wire, rid = batch.wire, ("msg_sim" if batch.wire is anthropic_wire else "chatcmpl-sim") + uuid.uuid4().hex[:22]
    try:
        req = wire.parse_chat(body, state.config.strict_params)
        profile = state.profile(model)
        input_tokens = req.input_tokens()
        if input_tokens + (req.max_tokens or 0) > profile.context_window:
            raise wire.context_error(input_tokens, req.max_tokens, profile.context_window)
        plan = plan_chat(req, profile, Overrides(), input_tokens)
    except RequestError as err:
        return False, orjson.loads(wire.error_body(err))
    state.billing.record(batch.account, model, wire.billable(plan, plan.output_tokens), request_id=rid, tier="batch")
    return True, orjson.loads(wire.completion(plan, rid, int(time.time()), model))


def _files(state: SimState, batch: SimBatch) -> None:
    """OpenAI's output and error files: ``{id, custom_id, response: {status_code, request_id, body}, error}``."""
    good, bad = [], []
    for custom_id, ok, body in batch.results:
        line = {"id": f"batch_req_{uuid.uuid4().hex[:20]}", "custom_id": custom_id,
                "response": {"status_code": 200 if ok else 400, "request_id": uuid.uuid4().hex, "body": body},
                "error": None}
        (good if ok else bad).append(orjson.dumps(line))
    for custom_id, _ in batch.lines[len(batch.results):]:
        bad.append(orjson.dumps({"id": f"batch_req_{uuid.uuid4().hex[:20]}", "custom_id": custom_id,
                                 "response": None, "error": {"code": "batch_expired" if batch.status == "in_progress"
                                                             else "batch_cancelled",
                                                             "message": "This request was not run."}}))
    for name, lines in (("output_file_id", good), ("error_file_id", bad)):
        if lines:
            file_id = f"file-sim{uuid.uuid4().hex[:20]}"
            state.batches.files[file_id] = (batch.account, "batch_output", b"\n".join(lines) + b"\n")
            setattr(batch, name, file_id)


def add_routes(app: web.Application) -> None:
    app[TASKS] = set()
    app.router.add_post("/v1/files", create_file)
    app.router.add_get("/v1/files/{file_id}/content", file_content)
    app.router.add_delete("/v1/files/{file_id}", delete_file)
    app.router.add_post("/v1/batches", create_openai_batch)
    app.router.add_get("/v1/batches", list_openai_batches)
    app.router.add_get("/v1/batches/{batch_id}", get_openai_batch)
    app.router.add_post("/v1/batches/{batch_id}/cancel", cancel_openai_batch)
    app.router.add_post("/v1/messages/batches", create_anthropic_batch)
    app.router.add_get("/v1/messages/batches/{batch_id}", get_anthropic_batch)
    app.router.add_post("/v1/messages/batches/{batch_id}/cancel", cancel_anthropic_batch)
    app.router.add_get("/v1/messages/batches/{batch_id}/results", anthropic_results)
