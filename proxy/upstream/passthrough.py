"""The Anthropic Messages API passed through: a Messages request to an Anthropic deployment, as the client wrote it.

When a client speaks the Messages API and the deployment is Anthropic's, translating through a chat request
would lose what chat cannot carry: ``thinking`` and its signed blocks passed back, ``cache_control``
breakpoints, ``top_k``, ``anthropic-beta`` features. ``NativeMessages`` is the ``Dialect`` for such an attempt:
the request is the client's body with the deployment's ``model`` and the plan's ``max_tokens`` (the alias's
output cap) and the client's ``anthropic-beta`` header; the answer is read by the Anthropic dialect as ever
(usage through the usage boundary, errors by class, the chat-shaped result the caches and estimates use), and
the provider's own body or events are kept for the client (``ChatResult.native``; ``RawEvents.take``), so the
surface writes them back unchanged but for the gateway's id, alias and settled usage
(``proxy.api.messages.native``). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from proxy.snapshot import Deployment
from proxy.upstream.anthropic import API_VERSION, AnthropicDialect
from proxy.upstream.anthropic_response import AnthropicStreamTranslator, parse_message
from proxy.upstream.base import ChatResult, SSEEvent, UpstreamRequest


class RawEvents:
    """The Anthropic stream translator, keeping every event as received until the encoder takes it."""

    __slots__ = ("inner", "raw")

    def __init__(self) -> None:
        self.inner = AnthropicStreamTranslator()
        self.raw: list[SSEEvent] = []

    @property
    def usage(self) -> Any:
        return self.inner.usage

    @property
    def finish_reason(self) -> str | None:
        return self.inner.finish_reason

    @property
    def done(self) -> bool:
        return self.inner.done

    def feed(self, event: SSEEvent) -> list[dict]:
        chunks = self.inner.feed(event)  # raises on an error event: the surface writes its own error event
        self.raw.append(event)
        return chunks

    def text_so_far(self) -> str:
        return self.inner.text_so_far()

    def take(self) -> list[SSEEvent]:
        taken, self.raw = self.raw, []
        return taken


class NativeMessages(AnthropicDialect):
    """One Messages request's attempts on Anthropic deployments (see the module docstring)."""

    def __init__(self, body: Mapping[str, Any], beta: str | None) -> None:
        self.body = body
        self.beta = beta

    def validate(self, body: dict, deployment: Deployment) -> None:
        """Nothing to refuse: the body is Anthropic's own, and Anthropic checks it."""

    def chat_request(self, body: dict, deployment: Deployment, secret: str | None, *, max_output_tokens: int,
                     extra_headers: Mapping[str, str] | None = None) -> UpstreamRequest:
        headers = dict(extra_headers or {})
        headers["content-type"] = "application/json"
        headers["anthropic-version"] = API_VERSION
        if self.beta:
            headers["anthropic-beta"] = self.beta
        headers["accept"] = "text/event-stream" if self.body.get("stream") else "application/json"
        if secret:
            headers["x-api-key"] = secret
        out = {**self.body, "model": deployment.model, "max_tokens": max_output_tokens}
        return UpstreamRequest(url=deployment.base_url.rstrip("/") + "/v1/messages", headers=headers,
                               body=orjson.dumps(out))

    def parse_chat(self, data: dict) -> ChatResult:
        result = parse_message(data)
        result.native = data
        return result

    def stream_translator(self) -> RawEvents:  # type: ignore[override]
        return RawEvents()
