"""aiohttp handlers for the model endpoints: one engine, two wire dialects.

A chat request goes: authenticate -> dialect headers -> parse -> overrides ->
fault draw -> context check -> plan (all before any byte; refusals are not
billed) -> TTFT -> answer (JSON or paced SSE). Once generation starts the
request is billed exactly once in a ``finally``, for the output tokens
actually written. A client that goes away is noticed either by handler
cancellation (the runner's ``handler_cancellation=True``) or by polling the
transport every :data:`POLL_S` while waiting, so hangs never leak.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from types import ModuleType
from typing import Any

import orjson
from aiohttp import web

from infra.simulator import (
    anthropic_wire,
    azure_wire,
    bedrock_wire,
    embeddings,
    gemini_wire,
    openai_wire,
    responses_wire,
)
from infra.simulator.faults import OUTCOME, PRE_GENERATION
from infra.simulator.generation import Overrides, Plan, RequestError, plan_chat
from infra.simulator.state import STATE, SimState

POLL_S = 0.01
_KIND_OUTCOME = {"invalid_request": "bad_request", "authentication": "unauthorized", "not_found": "bad_request",
                 "rate_limit": "rate_limited", "server_error": "server_error", "unavailable": "unavailable",
                 "overloaded": "overloaded", "content_policy": "content_policy",
                 "context_length": "context_length"}
_SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}


def _path_model(request: web.Request) -> str | None:
    """The model named by the URL (Azure's deployment, Bedrock's model id, Gemini's ``{model}:{method}``)."""
    info = request.match_info
    if "deployment" in info:
        return info["deployment"]
    if "model" in info:
        return info["model"]
    if "target" in info:
        return info["target"].rpartition(":")[0] or None
    return None


class ClientGone(Exception):
    """The caller closed the connection while the simulator was still working."""


def _gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def sleep_watch(request: web.Request, seconds: float) -> None:
    """Sleep, but raise :class:`ClientGone` as soon as the client disconnects."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while True:
        if _gone(request):
            raise ClientGone
        remaining = end - loop.time()
        if remaining <= 0:
            return
        await asyncio.sleep(min(remaining, POLL_S))


def _error_response(wire: ModuleType, err: RequestError, rid: str) -> web.Response:
    headers = {"x-request-id": rid, **err.headers}
    if hasattr(wire, "error_headers"):
        headers.update(wire.error_headers(err))
    if wire is anthropic_wire:
        headers["request-id"] = rid
    return web.Response(status=err.status, body=wire.error_body(err), content_type="application/json",
                        headers=headers)


async def _read_body(request: web.Request) -> Any:
    """The parsed JSON body (None if not JSON), kept in the received-bodies ring for tests."""
    raw = await request.read()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = None
    request.app[STATE].received.record(request.path, body)
    return body


async def _authenticate(state: SimState, wire: ModuleType, request: web.Request) -> str:
    if hasattr(wire, "authenticate"):  # signatures (SigV4), OAuth tokens, Azure's headers
        return wire.authenticate(state, request, await request.read())  # (aiohttp keeps the body read once)
    key = wire.api_key(request.headers)
    account = state.account_for(key)
    if account is None:
        raise wire.auth_error(missing=not key)
    return account


RATE_HEADERS = web.RequestKey("sim_rate_headers", dict)  # the quota's headers, for the answer (infra.simulator.quota)
_RATE_STYLE = {openai_wire: "openai", azure_wire: "openai", responses_wire: "openai", anthropic_wire: "anthropic"}


def _new_id(wire: ModuleType) -> str:
    prefix = {anthropic_wire: "msg_sim", responses_wire: "resp_sim", gemini_wire: "sim-"}.get(wire, "chatcmpl-sim")
    return prefix + uuid.uuid4().hex[:22]


@dataclasses.dataclass(slots=True)
class _Progress:
    sent: int = 0
    outcome: str = "ok"


async def chat(request: web.Request, wire: ModuleType) -> web.StreamResponse:
    """``POST /v1/chat/completions`` or ``POST /v1/messages`` depending on ``wire``."""
    state = request.app[STATE]
    started = time.time()
    rid = _new_id(wire)
    model = "unknown"
    try:
        body = await _read_body(request)
        path_model = _path_model(request)
        if path_model:
            model = path_model
        elif isinstance(body, dict) and isinstance(body.get("model"), str):
            model = body["model"]
        account = await _authenticate(state, wire, request)
        wire.check_headers(request.headers)
        if not isinstance(body, dict):
            raise RequestError(400, "invalid_request", "The request body is not valid JSON.")
        if path_model:
            req = wire.parse_chat(body, state.config.strict_params, path_model)
        else:
            req = wire.parse_chat(body, state.config.strict_params)
        if hasattr(wire, "stream_from_path"):
            req.stream = wire.stream_from_path(request.path)
        if hasattr(wire, "requested_tier"):  # a tier asked by header (Vertex AI)
            req.service_tier = wire.requested_tier(request.headers)
        ov = Overrides.from_headers(request.headers)
        if not wire.REPORTS_CACHE_WRITE and ov.cache_write_tokens:
            ov = dataclasses.replace(ov, cache_write_tokens=0)
        profile = state.profile(model)
        fault = state.faults.draw(profile.faults, ov.fault)
        retry_after = ov.retry_after if ov.retry_after is not None else profile.faults.retry_after_s
        input_tokens = req.input_tokens()
        if fault in PRE_GENERATION and fault != "context_length":
            raise wire.fault_error(fault, model, retry_after)
        if fault == "context_length" or input_tokens + (req.max_tokens or 0) > profile.context_window:
            raise wire.context_error(input_tokens, req.max_tokens, profile.context_window)
        request[RATE_HEADERS] = state.quotas.take(account, model, profile,
                                                  input_tokens + (req.max_tokens or profile.output_tokens),
                                                  time.time(), _RATE_STYLE.get(wire, ""))
        if req.cache_key and not ov.cached_tokens:  # OpenAI's automatic prefix caching, keyed
            ov = dataclasses.replace(ov, cached_tokens=state.prompt_cache.automatic(
                account, model, req.cache_key, req.texts, time.time()))
        cache = state.prompt_cache.use(account, model, req.cache_prefix, time.time())
        if cache.read or cache.write:  # cache_control (x-sim-cached-tokens / -cache-write-tokens still win)
            ov = dataclasses.replace(ov, cached_tokens=ov.cached_tokens or cache.read,
                                     cache_write_tokens=ov.cache_write_tokens or cache.write)
        plan = plan_chat(req, profile, ov, input_tokens)
        plan.service_tier = ov.service_tier or req.service_tier
        if cache.write_1h and plan.cache_write_tokens == cache.write:
            plan.cache_write_1h = cache.write_1h
    except RequestError as err:
        state.stats.outcome(model, _KIND_OUTCOME.get(err.kind, "bad_request"))
        return _error_response(wire, err, rid)

    if fault == "hang":
        return await _hang(request, state, model, started)
    ttft = (ov.ttft_ms if ov.ttft_ms is not None else profile.ttft_ms) / 1000
    rate = ov.tokens_per_s if ov.tokens_per_s is not None else profile.tokens_per_s
    cut = ov.disconnect_after if ov.disconnect_after is not None else profile.faults.disconnect_after_tokens
    progress = _Progress(outcome=OUTCOME.get(fault or "", "ok"))
    running = state.stats.started(model)
    try:
        if ttft > 0:
            await sleep_watch(request, ttft)
        if req.stream:
            return await _stream(request, state, wire, plan, rid, model, req.include_usage, rate,
                                 cut if fault in ("disconnect", "stream_error") else None, fault, progress)
        return await _non_stream(request, wire, plan, rid, model, rate, fault, progress)
    except (ClientGone, ConnectionResetError, asyncio.CancelledError) as exc:
        progress.outcome = "client_closed"
        state.stats.client_closed(model, started)
        if isinstance(exc, asyncio.CancelledError):
            raise
        return web.Response(status=499)  # never reaches the departed client
    finally:
        running.in_flight -= 1
        state.stats.outcome(model, progress.outcome)
        state.billing.record(account, model, wire.billable(plan, progress.sent), started, rid)


async def _hang(request: web.Request, state: SimState, model: str, started: float) -> web.StreamResponse:
    """Accept and answer nothing until the client gives up (hangs are not billed)."""
    try:
        while not _gone(request):
            await asyncio.sleep(POLL_S)
    finally:
        state.stats.outcome(model, "hang")
        state.stats.client_closed(model, started)
    return web.Response(status=499)


async def _abort(request: web.Request) -> None:
    """Flush what was written, then drop the TCP connection without a terminal event."""
    transport = request.transport
    if transport is None:
        return
    for _ in range(200):
        if transport.is_closing() or transport.get_write_buffer_size() == 0:
            break
        await asyncio.sleep(0.005)
    transport.abort()


async def _non_stream(request: web.Request, wire: ModuleType, plan: Plan, rid: str, model: str,
                      rate: float, fault: str | None, progress: _Progress) -> web.StreamResponse:
    if rate > 0 and plan.output_tokens:
        await sleep_watch(request, plan.output_tokens / rate)
    if fault == "disconnect":
        await _abort(request)
        return web.Response(status=499)  # the connection is gone; nothing is sent
    if fault == "stream_error":
        return _error_response(wire, wire.fault_error("500", model, 0), rid)
    progress.sent = plan.output_tokens
    headers = {"x-request-id": rid, **request.get(RATE_HEADERS, {})}
    if wire is anthropic_wire:
        headers["request-id"] = rid
    return web.Response(body=wire.completion(plan, rid, int(time.time()), model),
                        content_type="application/json", headers=headers)


async def _stream(request: web.Request, state: SimState, wire: ModuleType, plan: Plan, rid: str, model: str,
                  include_usage: bool, rate: float, cut: int | None, fault: str | None,
                  progress: _Progress) -> web.StreamResponse:
    enc = wire.StreamEncoder(plan, rid, int(time.time()), model, include_usage)
    headers = dict(_SSE_HEADERS, **{"x-request-id": rid}, **request.get(RATE_HEADERS, {}))
    if hasattr(wire, "STREAM_CONTENT_TYPE"):
        headers["Content-Type"] = wire.STREAM_CONTENT_TYPE
    if wire is anthropic_wire:
        headers["request-id"] = rid
    resp = web.StreamResponse(headers=headers)
    await resp.prepare(request)
    st = state.stats.model(model)
    st.open_streams += 1
    try:
        pieces = plan.pieces
        n = len(pieces) if cut is None else min(cut, len(pieces))
        complete = cut is None
        if rate <= 0:
            buf = enc.head() + b"".join([enc.piece(p) for p in pieces[:n]])
            if complete:
                buf += enc.tail(n)
            await resp.write(buf)
            progress.sent = n
        else:
            await resp.write(enc.head())
            loop = asyncio.get_running_loop()
            t0, i = loop.time(), 0
            while i < n:
                due = min(n, int((loop.time() - t0) * rate) + 1)
                if due > i:
                    await resp.write(b"".join([enc.piece(p) for p in pieces[i:due]]))
                    progress.sent = i = due
                else:
                    await sleep_watch(request, t0 + i / rate - loop.time())
            if complete:
                await resp.write(enc.tail(n))
        if fault == "disconnect":
            await _abort(request)
            return resp
        if fault == "stream_error":
            err = wire.fault_error("529" if wire is anthropic_wire else "500", model, 0)
            await resp.write(enc.error(err))
        await resp.write_eof()
        return resp
    finally:
        st.open_streams -= 1


async def handle_openai_chat(request: web.Request) -> web.StreamResponse:
    return await chat(request, openai_wire)


async def handle_anthropic_messages(request: web.Request) -> web.StreamResponse:
    return await chat(request, anthropic_wire)


async def handle_azure_chat(request: web.Request) -> web.StreamResponse:
    return await chat(request, azure_wire)


async def handle_bedrock_converse(request: web.Request) -> web.StreamResponse:
    return await chat(request, bedrock_wire)


async def handle_gemini(request: web.Request) -> web.StreamResponse:
    method = request.match_info["target"].rpartition(":")[2]
    if method not in ("generateContent", "streamGenerateContent"):
        err = RequestError(404, "not_found", f"Method {method!r} is not found for this model.")
        return _error_response(gemini_wire, err, _new_id(gemini_wire))
    return await chat(request, gemini_wire)


async def handle_openai_responses(request: web.Request) -> web.StreamResponse:
    return await chat(request, responses_wire)


async def count_tokens(request: web.Request, wire: ModuleType) -> web.Response:
    """``POST /v1/responses/input_tokens`` or ``POST /v1/messages/count_tokens``: the request's input tokens, as
    its answer would count them; nothing generated or billed."""
    state, rid = request.app[STATE], _new_id(wire)
    try:
        body = await _read_body(request)
        await _authenticate(state, wire, request)
        if not isinstance(body, dict):
            raise RequestError(400, "invalid_request", "The request body is not valid JSON.")
        if wire is anthropic_wire:
            req = wire.parse_chat({"max_tokens": 1, **body}, False)
            return web.json_response({"input_tokens": req.input_tokens()}, headers={"request-id": rid})
        req = wire.parse_chat(body, False)
        return web.json_response({"object": "response.input_tokens", "input_tokens": req.input_tokens()})
    except RequestError as err:
        return _error_response(wire, err, rid)


async def handle_responses_input_tokens(request: web.Request) -> web.Response:
    return await count_tokens(request, responses_wire)


async def handle_messages_count_tokens(request: web.Request) -> web.Response:
    return await count_tokens(request, anthropic_wire)


async def handle_embeddings(request: web.Request) -> web.StreamResponse:
    """``POST /v1/embeddings``: deterministic unit vectors; honours 429/5xx/hang faults."""
    state = request.app[STATE]
    started = time.time()
    rid = _new_id(openai_wire)
    model = "unknown"
    try:
        body = await _read_body(request)
        if isinstance(body, dict) and isinstance(body.get("model"), str):
            model = body["model"]
        account = await _authenticate(state, openai_wire, request)
        if not isinstance(body, dict):
            raise RequestError(400, "invalid_request", "The request body is not valid JSON.")
        model, inputs, dims, fmt = openai_wire.parse_embeddings(body)
        ov = Overrides.from_headers(request.headers)
        profile = state.profile(model)
        fault = state.faults.draw(profile.faults, ov.fault)
        if fault in ("429", "500", "503", "529"):
            retry = ov.retry_after if ov.retry_after is not None else profile.faults.retry_after_s
            raise openai_wire.fault_error(fault, model, retry)
    except RequestError as err:
        state.stats.outcome(model, _KIND_OUTCOME.get(err.kind, "bad_request"))
        return _error_response(openai_wire, err, rid)
    if fault == "hang":
        return await _hang(request, state, model, started)
    ttft = (ov.ttft_ms if ov.ttft_ms is not None else profile.ttft_ms) / 1000
    if ttft > 0:
        try:
            await sleep_watch(request, ttft)
        except ClientGone:
            state.stats.outcome(model, "client_closed")
            state.stats.client_closed(model, started)
            return web.Response(status=499)
    dims = dims or profile.embedding_dims
    tokens = sum(embeddings.input_tokens(x) for x in inputs)
    vectors = [embeddings.embedding_vector(embeddings.input_key(x), dims) for x in inputs]
    data = [embeddings.encode_base64(v) for v in vectors] if fmt == "base64" else vectors
    state.stats.outcome(model, "ok")
    state.billing.record(account, model, openai_wire.billable(_embedding_plan(tokens), 0), started, rid)
    return web.Response(body=openai_wire.embeddings_body(model, data, tokens), content_type="application/json",
                        headers={"x-request-id": rid})


def _embedding_plan(tokens: int) -> Plan:
    return Plan(kind="text", pieces=[], finish="stop", input_tokens=tokens)
