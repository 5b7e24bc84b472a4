"""POST /v1/messages and POST /v1/messages/count_tokens: the Anthropic Messages API on farebox's front door.

A Messages request is validated in Anthropic's terms and carried as the equivalent chat request through the
one pipeline every surface shares (``proxy.api.chat.serve``: idempotency, privacy, both caches, admission,
routing and failover, metering, events). To an Anthropic deployment that sees the original body it goes as
the client wrote it and its answer comes back as Anthropic sent it (native passthrough: ``native.py``; thinking
and its signatures, ``cache_control``, ``top_k`` and ``anthropic-beta`` features reach Anthropic); to any other
deployment it is translated, and answered as a Message or as Messages stream events (``response.py``).
Errors on this surface are Anthropic-shaped (``proxy.api.app`` asks ``error_body``). Clients authenticate
with ``x-api-key`` (or a bearer token) holding a farebox virtual key; ``anthropic-version`` is accepted.

``count_tokens`` answers ``{"input_tokens": n}``: the Anthropic deployment's own count when the alias's first
deployment is one (the request as written, with the privacy policy's placeholders when it redacts), else
farebox's estimate for the alias's deployments (the most any of them would count: what admission holds
against); ``x-fb-token-count`` says which. Nothing is admitted or billed.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from proxy.api.chat import serve
from proxy.api.messages import native
from proxy.api.messages.request import validate_messages
from proxy.api.messages.response import MessagesEncoder, message_of
from proxy.api.steps import counted
from proxy.api.surface import Passthrough, Surface
from proxy.api.validate import ChatCall
from proxy.body import parse_json_object
from proxy.privacy.redact import Redaction
from proxy.runtime import RUNTIME
from proxy.upstream.passthrough import NativeMessages, redacted_body


def _render(completion: dict[str, Any], usage: Any, request_id: str, alias: str) -> dict[str, Any]:
    return message_of(completion, usage, f"msg_{request_id}", alias)


def surface_for(body: dict[str, Any], beta: str | None) -> Surface:
    """The Messages surface of one request: translated, or passed through to Anthropic deployments."""
    def make(redaction: Redaction | None) -> NativeMessages:
        if redaction is None:
            return NativeMessages(body, beta)
        return NativeMessages(body, beta, redact=redaction.redact, restore=redaction.restore)

    return Surface("messages", _render, lambda request_id, created, alias, tap: MessagesEncoder(
        f"msg_{request_id}", alias, tap), passthrough=Passthrough(
        "anthropic", make,
        lambda data, usage, request_id, alias, x_farebox: native.render(data, usage, f"msg_{request_id}", alias,
                                                                        x_farebox),
        lambda source, request_id, alias, tap, redaction: native.NativeEncoder(
            source, f"msg_{request_id}", alias, tap, redaction)))


async def create_message(request: web.Request) -> web.StreamResponse:
    call = validate_messages(parse_json_object(await request.read()))
    chat = ChatCall(call.alias, call.chat, call.stream, include_usage=True, requested_max_output=call.max_tokens,
                    max_output_param="max_tokens", native_only=call.native_only)
    return await serve(request, chat, call.body, surface_for(call.body, request.headers.get("anthropic-beta")))


async def count_tokens(request: web.Request) -> web.Response:
    call = validate_messages(parse_json_object(await request.read()), counting=True)
    body = {k: v for k, v in call.body.items() if k not in ("max_tokens", "stream")}
    count, source = await counted(request.app[RUNTIME], request, call.alias, call.chat, dialect="anthropic",
                                  needs=None, native_body=lambda redaction: body if redaction is None
                                  else redacted_body(body, redaction.redact))
    return web.json_response({"input_tokens": count}, headers={"x-fb-token-count": source})
