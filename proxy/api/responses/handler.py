"""POST /v1/responses and POST /v1/responses/input_tokens: the OpenAI Responses API on farebox's front door.

A Responses request is validated in its own terms, carried as the equivalent chat request through the one
pipeline every surface shares (``proxy.api.chat.serve``), and answered as a ``response`` object or as the
Responses stream's typed events (``response.py``), whichever dialect the deployment speaks. Errors are
OpenAI-shaped, as on every OpenAI surface. Stored responses (``previous_response_id``, ``GET``/``DELETE
/v1/responses/{id}``) are not kept yet: such a request is a 400 naming the parameter, and a ``GET`` a 404.

``input_tokens`` answers ``{"object": "response.input_tokens", "input_tokens": n}`` from farebox's own
estimate for the alias's deployments, without admitting or billing anything.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from proxy.api.chat import serve
from proxy.api.responses.request import validate_response
from proxy.api.responses.response import ResponsesEncoder, response_of
from proxy.api.steps import input_tokens
from proxy.api.surface import Surface
from proxy.api.validate import ChatCall
from proxy.body import parse_json_object
from proxy.errors import NotFound
from proxy.runtime import RUNTIME


def surface_for(body: dict[str, Any], created_at: int) -> Surface:
    """This request's surface: its answers echo what it asked (instructions, tools, metadata, …)."""
    def render(completion: dict[str, Any], usage: Any, request_id: str, alias: str) -> dict[str, Any]:
        return response_of(completion, usage, body, f"resp_{request_id}", alias, created_at)

    return Surface("responses", render, lambda request_id, created, alias, tap: ResponsesEncoder(
        body, f"resp_{request_id}", alias, created_at, tap))


async def create_response(request: web.Request) -> web.StreamResponse:
    call = validate_response(parse_json_object(await request.read()))
    chat = ChatCall(call.alias, call.chat, call.stream, include_usage=True, requested_max_output=call.max_output_tokens)
    created_at = int(request.app[RUNTIME].clock())
    return await serve(request, chat, call.body, surface_for(call.body, created_at))


async def count_input_tokens(request: web.Request) -> web.Response:
    call = validate_response({**parse_json_object(await request.read()), "stream": False})
    return web.json_response({"object": "response.input_tokens",
                              "input_tokens": input_tokens(request.app[RUNTIME], request, call.alias, call.chat)})


async def stored_response(request: web.Request) -> web.Response:
    raise NotFound(f"No stored response with id '{request.match_info['id']}': farebox does not keep responses yet "
                   "(send the whole conversation as input).", param="response_id", code="response_not_found")
