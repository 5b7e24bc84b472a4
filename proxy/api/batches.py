"""The OpenAI Batch API: ``POST /v1/batches``, ``GET /v1/batches``, ``GET /v1/batches/{id}``,
``POST /v1/batches/{id}/cancel``.

Creating a batch reads its input file (``proxy.batches.lines``) and checks every line before anything runs: the
shape, the endpoint, and that each line's ``model`` is an alias the key may use for that endpoint. A bad file
gives a batch that is ``failed`` at once with every problem in ``errors`` (OpenAI's behaviour), never a batch
half run. A good one is admitted whole (every line's hold taken now, ``proxy.batches.reserve``: a 429 when the
budgets cannot hold it, nothing kept), is ``in_progress``, and the gateway's runners (``proxy.batches.runner``)
feed its lines through the request path as the key that created it; or, for an alias with ``batch_via: provider``
(``proxy.batches.provider_plan``), it is admitted whole against its budgets (a 429 ``budget_exhausted`` when
its worst case does not fit: nothing is kept) and sent to the provider's batch API (``provider_run``). Reading a batch never bills: only its lines' requests
do, each once. A batch is its team's (another team's id is a 404). Errors are OpenAI-shaped.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from aiohttp import web

from proxy.admission.auth import allowed_alias
from proxy.admission.budget_port import BudgetAsk
from proxy.api.files import page_limit, store_of, visible_batch, visible_file
from proxy.batches import provider_money as money
from proxy.batches.lines import ENDPOINTS, Line, Problem, read_lines
from proxy.batches.objects import WINDOWS, batch_object, list_object, new_batch_id
from proxy.batches.provider_plan import chosen, plan
from proxy.batches.records import CANCELLABLE, BatchRecord
from proxy.batches.reserve_run import admit_lines, give_back
from proxy.body import parse_json_object
from proxy.errors import GatewayError, InvalidRequest
from proxy.metering.settlement import scopes_of
from proxy.runtime import RUNTIME, Runtime
from proxy.snapshot import KeyRecord, Snapshot

KIND = {"/v1/chat/completions": "chat", "/v1/embeddings": "embeddings", "/v1/messages": "chat"}  # the alias kind each endpoint takes
_MAX_METADATA = 16


async def create_batch(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    store, key = store_of(rt), request["key"]
    body = parse_json_object(await request.read())
    endpoint, window = body.get("endpoint"), body.get("completion_window")
    file_id = body.get("input_file_id")
    if not isinstance(file_id, str) or not file_id:
        raise InvalidRequest("Missing required parameter: 'input_file_id'.", param="input_file_id",
                             code="missing_required_parameter")
    if endpoint not in ENDPOINTS:
        raise InvalidRequest(f"'endpoint' must be one of {list(ENDPOINTS)}.", param="endpoint", code="invalid_value")
    if window not in WINDOWS:
        raise InvalidRequest(f"'completion_window' must be one of {list(WINDOWS)}.", param="completion_window",
                             code="invalid_value")
    metadata = _metadata(body.get("metadata"))
    unknown = set(body) - {"input_file_id", "endpoint", "completion_window", "metadata", "output_expires_after"}
    if unknown:
        raise InvalidRequest(f"Unknown parameter: '{sorted(unknown)[0][:64]}'.", param=sorted(unknown)[0][:64],
                             code="unknown_parameter")
    source = await visible_file(rt, request, file_id, "input_file_id")
    if source.purpose != "batch":
        raise InvalidRequest(f"The file {file_id} was not uploaded with purpose 'batch'.", param="input_file_id",
                             code="invalid_value")
    content = await store.file_content(source.id) or b""
    lines, problems = read_lines(content, endpoint, rt.options.batch_max_lines)
    snap = rt.pod.snapshot
    if not problems:
        problems = unusable_models(snap, key, lines, KIND[endpoint])
    now = int(rt.clock())
    batch_id, provider = new_batch_id(), None
    alias = None if problems else chosen(snap, key, endpoint, lines, rt.options.provider_batches)
    if alias is not None:  # sent whole to the provider's batch API (``proxy.batches.provider_run``)
        planned = plan(snap, key, alias, lines, rt.estimator, datetime.fromtimestamp(now, timezone.utc))
        if isinstance(planned, list):
            problems = planned
        else:
            provider = money.block(snap, key, scopes_of(key, None), alias.name, planned.deployment,
                                   planned.price_version, planned.estimates, planned.hold_micro,
                                   planned.dearest_micro)
    times = {"failed_at": now} if problems else {"in_progress_at": now}
    record = BatchRecord(batch_id, key.team, key.key_id, endpoint, source.id, window,
                         "failed" if problems else "in_progress", now, now + WINDOWS[window], metadata,
                         [p.to_dict() for p in problems], times, provider=None if problems else provider)
    if record.provider is not None:
        await admit_whole(rt, key, record, snap)
    elif not problems:  # the gateway runs it: every line held now (``proxy.batches.reserve``)
        record, lines = await admit_lines(rt, key, record, snap, lines, WINDOWS[window])
    await keep_batch(rt, record, [] if problems else lines)
    rt.pod.wake_batches()
    created = await store.get_batch(record.id)
    assert created is not None
    return web.json_response(batch_object(created))


async def admit_whole(rt: Runtime, key: KeyRecord, record: BatchRecord, snap: Snapshot) -> None:
    """Admit a provider batch as a whole against every budget its lines touch: a hold for the sum of their worst
    cases (``proxy.batches.provider_money``), or the caller's 429 in this API's shape; nothing is kept when
    refused. The hold is recorded in the same turn as it is funded (the ``BudgetPort`` contract)."""
    b = record.provider
    assert b is not None
    ests = b["estimates"]
    ask = BudgetAsk(request_id=record.id, scopes=b["scopes"], hold_micro=b["hold_micro"],
                    est_input=sum(e[0] for e in ests), max_output=sum(e[1] for e in ests), now_s=rt.clock(),
                    key_id=key.key_id, cap_micro=b["dearest_micro"],
                    hold_ttl_s=money.hold_ttl_s(WINDOWS[record.completion_window]))
    funding = await rt.budgets.admit(snap, ask)
    if funding.hold_micro is not None:
        b["hold_micro"] = funding.hold_micro
    event = money.admitted(record.id, b, key, snap, rt.options.pod_id, WINDOWS[record.completion_window],
                           funding.leases, datetime.fromtimestamp(rt.clock(), timezone.utc))
    if not rt.recorder.emit(event):
        rt.budgets.release(record.id)
        raise GatewayError("The event log cannot record the batch's admission right now; retry shortly.",
                           status=503, code="event_log_unavailable", headers={"Retry-After": "1"})
    for notice in funding.events:
        rt.recorder.emit(notice)


async def keep_batch(rt: Runtime, record: BatchRecord, lines: list[Line]) -> None:
    """Keep the new batch; a batch the store could not keep gives back at once what it held."""
    try:
        await store_of(rt).create_batch(record, lines)
    except Exception:
        if record.provider is not None:
            rt.recorder.emit(money.settled(record.id, record.provider, [], "failed", datetime.now(timezone.utc)))
        if record.reserved is not None:
            give_back(rt, record.id, record.reserved, [(ln.number, ln.held) for ln in lines if ln.held is not None])
        raise


def unusable_models(snap: Snapshot, key: KeyRecord, lines: list[Line], kind: str) -> list[Problem]:
    """A problem for each model (first line naming it) the key may not use for the endpoint."""
    problems: list[Problem] = []
    checked: set[str] = set()
    for line in lines:
        if line.model in checked:
            continue
        checked.add(line.model)
        try:
            allowed_alias(snap, key, line.model, kind)
        except GatewayError as exc:
            problems.append(Problem(exc.code or "invalid_value", exc.message, line.number, "body.model"))
    return problems


def _metadata(raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if (not isinstance(raw, dict) or len(raw) > _MAX_METADATA
            or not all(isinstance(k, str) and isinstance(v, str) and len(k) <= 64 and len(v) <= 512
                       for k, v in raw.items())):
        raise InvalidRequest(f"'metadata' must be an object of at most {_MAX_METADATA} string pairs (keys up to 64 "
                             "characters, values up to 512).", param="metadata", code="invalid_value")
    return dict(raw)


async def _visible(rt: Runtime, request: web.Request) -> BatchRecord:
    return await visible_batch(rt, request, ENDPOINTS)


async def get_batch(request: web.Request) -> web.Response:
    return web.json_response(batch_object(await _visible(request.app[RUNTIME], request)))


async def list_batches(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    limit = page_limit(request.query.get("limit"), 20, 100)
    found = await store_of(rt).list_batches(request["key"].team, request.query.get("after"), limit + 1,
                                            endpoints=ENDPOINTS)
    return web.json_response(list_object([batch_object(b) for b in found[:limit]], len(found) > limit))


async def cancel_batch(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    record = await _visible(rt, request)
    if record.status not in CANCELLABLE:
        raise GatewayError(f"Cannot cancel a batch with status '{record.status}'.", status=409,
                           code="batch_not_cancellable")
    cancelled = await store_of(rt).cancel(record.id, int(rt.clock()))
    rt.pod.wake_batches()
    assert cancelled is not None
    return web.json_response(batch_object(cancelled))


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/batches", create_batch)
    app.router.add_get("/v1/batches", list_batches)
    app.router.add_get("/v1/batches/{id}", get_batch)
    app.router.add_post("/v1/batches/{id}/cancel", cancel_batch)
