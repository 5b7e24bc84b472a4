"""The OpenAI Responses API on farebox's front door: ``POST /v1/responses``, ``POST /v1/responses/input_tokens``,
``GET``/``DELETE /v1/responses/{id}`` and ``GET /v1/responses/{id}/input_items``.

A Responses request is validated in its own terms, carried as the equivalent chat request through the one
pipeline every surface shares (``proxy.api.chat.serve``), and answered as a ``response`` object or as the
Responses stream's typed events (``response.py``), whichever dialect the deployment speaks. To a deployment
that serves the Responses API itself (``openai`` dialect with the ``responses`` capability) the request goes as
the client wrote it (with the privacy policy's placeholders when it redacts) and the provider's answer comes
back (``native.py``): built-in tools and reasoning items reach it, and only such deployments can take them. Errors are
OpenAI-shaped, as on every OpenAI surface. ``previous_response_id`` continues a stored response of the
caller's team, and ``store`` (the default) keeps the new one (``stored.py``; the ``ResponseStore`` port:
SQLite for embedded and ``--workers`` pods, Redis for distributed ones, with a TTL). A stored response is
another team's or absent alike: 404.

``input_tokens`` answers ``{"object": "response.input_tokens", "input_tokens": n}``: the provider's own count
when the alias's first deployment serves the Responses API (the continued conversation, with the privacy
policy's placeholders when it redacts), else farebox's estimate for the alias's deployments;
``x-fb-token-count`` says which. Nothing is admitted or billed.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from proxy.api.chat import serve
from proxy.api.responses import native, stored
from proxy.api.responses.request import validate_response
from proxy.api.responses.response import ResponsesEncoder, response_of
from proxy.api.steps import counted
from proxy.api.surface import Passthrough, Surface
from proxy.api.validate import ChatCall
from proxy.body import parse_json_object
from proxy.privacy.redact import Redaction
from proxy.runtime import RUNTIME, Runtime
from proxy.stored_responses import StoredResponse, readable
from proxy.upstream.responses_native import NativeResponses, redacted_body


def surface_for(body: dict[str, Any], created_at: int, keeper: stored.Keeper | None,
                earlier: list[dict[str, Any]] | None = None) -> Surface:
    """This request's surface: its answers echo what it asked (instructions, tools, metadata, …), and with
    ``keeper`` (``store``) the final response is handed to the store before its last bytes go out. ``earlier``: the
    conversation ``previous_response_id`` continues (a passed-through request sends it whole)."""
    def kept(rendered: dict[str, Any]) -> dict[str, Any]:
        if keeper is not None:
            keeper.final = rendered
        return rendered

    def render(completion: dict[str, Any], usage: Any, request_id: str, alias: str) -> dict[str, Any]:
        return kept(response_of(completion, usage, body, f"resp_{request_id}", alias, created_at))

    keep = None if keeper is None else keeper.keep

    def make(redaction: Redaction | None) -> NativeResponses:  # only for a deployment that serves the API
        upstream_body = {**{k: v for k, v in body.items() if k != "previous_response_id"},
                         "input": native.native_input(body, earlier or [])}
        if redaction is None:
            return NativeResponses(upstream_body)
        return NativeResponses(upstream_body, redact=redaction.redact, restore=redaction.restore)

    passthrough = Passthrough(
        "openai", make,
        lambda data, usage, request_id, alias, x_farebox: kept(native.render(
            data, usage, body, f"resp_{request_id}", alias, x_farebox)),
        lambda source, request_id, alias, tap, redaction: native.NativeEncoder(
            source, body, f"resp_{request_id}", alias, tap, keep=keep, redaction=redaction),
        needs="responses")
    return Surface("responses", render, lambda request_id, created, alias, tap: ResponsesEncoder(
        body, f"resp_{request_id}", alias, created_at, tap, keep=keep),
        settled=None if keeper is None else keeper.write, passthrough=passthrough)


async def _earlier(request: web.Request, rt: Runtime, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The conversation ``previous_response_id`` continues (empty without one); 404 if not the caller's."""
    previous = stored.previous_id(body)
    if previous is None:
        return []
    record = readable(await rt.responses.get(previous, rt.clock()), request["key"].team, rt.clock())
    if record is None:
        raise stored.not_found(previous, "previous_response_id")
    return stored.history(record)


async def create_response(request: web.Request) -> web.StreamResponse:
    rt = request.app[RUNTIME]
    body = parse_json_object(await request.read())
    earlier = await _earlier(request, rt, body)
    call = validate_response(body, earlier)
    chat = ChatCall(call.alias, call.chat, call.stream, include_usage=True, requested_max_output=call.max_output_tokens,
                    max_output_param="max_output_tokens", native_only=call.native_only)
    keeper = None
    if body.get("store", True) is not False:
        context = earlier + stored.resolved(stored.own_items(body["input"]), earlier)
        keeper = stored.Keeper(rt.responses, request["key"], context, rt.options.stored_responses_ttl_s,
                               rt.options.stored_responses_max_bytes,
                               on_failure=lambda reason: rt.metrics.responses_not_stored.labels(reason).inc())
    return await serve(request, chat, call.body, surface_for(call.body, int(rt.clock()), keeper, earlier))


async def count_input_tokens(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    body = {**parse_json_object(await request.read()), "stream": False}
    earlier = await _earlier(request, rt, body)
    call = validate_response(body, earlier)
    sent = {k: v for k, v in body.items() if k not in ("previous_response_id", "stream", "store")}
    sent["input"] = native.native_input(body, earlier)
    count, source = await counted(rt, request, call.alias, call.chat, dialect="openai", needs="responses",
                                  native_body=lambda redaction: sent if redaction is None
                                  else redacted_body(sent, redaction.redact))
    return web.json_response({"object": "response.input_tokens", "input_tokens": count},
                             headers={"x-fb-token-count": source})


async def _stored(request: web.Request) -> tuple[Runtime, StoredResponse]:
    rt, response_id = request.app[RUNTIME], request.match_info["id"]
    record = readable(await rt.responses.get(response_id, rt.clock()), request["key"].team, rt.clock())
    if record is None:
        raise stored.not_found(response_id)
    return rt, record


async def get_response(request: web.Request) -> web.Response:
    _, record = await _stored(request)
    return web.json_response(record.response)


async def delete_response(request: web.Request) -> web.Response:
    rt, record = await _stored(request)
    await rt.responses.delete(record.id)
    return web.json_response({"id": record.id, "object": "response.deleted", "deleted": True})


async def list_input_items(request: web.Request) -> web.Response:
    _, record = await _stored(request)
    return web.json_response(stored.items_page(record.context, request.query))
