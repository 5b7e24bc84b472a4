"""The Anthropic Messages API passed through: a Messages request to an Anthropic deployment, as the client wrote it.

When a client speaks the Messages API and the deployment is Anthropic's, translating through a chat request
would lose what chat cannot carry: ``thinking`` and its signed blocks passed back, ``cache_control``
breakpoints, ``top_k``, ``anthropic-beta`` features. ``NativeMessages`` is the ``Dialect`` for such an attempt:
the request is the client's body with the deployment's ``model`` and the plan's ``max_tokens`` (the alias's
output cap) and the client's ``anthropic-beta`` header; the answer is read by the Anthropic dialect as ever
(usage through the usage boundary, errors by class, the chat-shaped result the caches and estimates use), and
the provider's own body or events are kept for the client (``ChatResult.native``; ``RawEvents.take``), so the
surface writes them back unchanged but for the gateway's id, alias and settled usage
(``proxy.api.messages.native``).

When the privacy policy redacts for the deployment, ``redact`` (the request's ``Redaction.redact``) puts the
same placeholders into the client's body that the scanned chat body got: every text the provider reads
(system, text blocks, tool results, tool-use inputs), never a ``thinking`` block (the model's own, signed:
changing it would void its signature); ``restore`` puts the values back into the answer's text and tool-use
inputs (streams: ``proxy.api.messages.native`` restores the deltas). Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson

from proxy.snapshot import Deployment
from proxy.upstream.anthropic import AnthropicDialect, headers
from proxy.upstream.anthropic_response import AnthropicStreamTranslator, parse_message
from proxy.upstream.base import ChatResult, SSEEvent, UpstreamRequest

Rewrite = Callable[[str], str]
_SIGNED = frozenset({"thinking", "redacted_thinking"})


def _strings(value: Any, rewrite: Rewrite) -> Any:
    """``value`` with every string in it rewritten (a tool-use input, a tool result)."""
    if isinstance(value, str):
        return rewrite(value)
    if isinstance(value, list):
        return [_strings(v, rewrite) for v in value]
    if isinstance(value, dict):
        return {k: _strings(v, rewrite) for k, v in value.items()}
    return value


def _blocks(content: Any, rewrite: Rewrite) -> Any:
    if isinstance(content, str):
        return rewrite(content)
    if not isinstance(content, list):
        return content
    out = []
    for block in content:
        if isinstance(block, dict) and block.get("type") not in _SIGNED:
            block = dict(block)
            for field in ("text", "input", "content"):
                if field in block:
                    block[field] = _strings(block[field], rewrite)
        out.append(block)
    return out


def redacted_body(body: Mapping[str, Any], redact: Rewrite) -> dict[str, Any]:
    """A copy of a Messages body with ``redact`` applied to every text the provider reads but signed blocks."""
    out = dict(body)
    if "system" in out:
        out["system"] = _blocks(out["system"], redact)
    if isinstance(out.get("messages"), list):
        out["messages"] = [{**m, "content": _blocks(m.get("content"), redact)} if isinstance(m, dict) else m
                           for m in out["messages"]]
    return out


def restored_message(data: dict[str, Any], restore: Rewrite) -> dict[str, Any]:
    """A Messages answer with ``restore`` applied to its text and tool-use inputs (never its thinking)."""
    return {**data, "content": _blocks(data.get("content"), restore)}


class RawEvents:
    """The Anthropic stream translator, keeping every event as received until the encoder takes it."""

    __slots__ = ("inner", "raw", "restores")

    def __init__(self, restores: bool = False) -> None:
        self.inner = AnthropicStreamTranslator()
        self.raw: list[SSEEvent] = []
        self.restores = restores  # the provider saw placeholders: the encoder restores the deltas

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

    def __init__(self, body: Mapping[str, Any], beta: str | None, redact: Rewrite | None = None,
                 restore: Rewrite | None = None) -> None:
        self.body = body if redact is None else redacted_body(body, redact)
        self.beta = beta
        self.restore = restore

    def validate(self, body: dict, deployment: Deployment) -> None:
        """Nothing to refuse: the body is Anthropic's own, and Anthropic checks it."""

    def chat_request(self, body: dict, deployment: Deployment, secret: str | None, *, max_output_tokens: int,
                     extra_headers: Mapping[str, str] | None = None) -> UpstreamRequest:
        out = {**self.body, "model": deployment.model, "max_tokens": max_output_tokens}
        return UpstreamRequest(url=deployment.base_url.rstrip("/") + "/v1/messages",
                               headers=headers(secret, extra_headers, stream=bool(self.body.get("stream")),
                                               beta=self.beta),
                               body=orjson.dumps(out))

    def parse_chat(self, data: dict) -> ChatResult:
        result = parse_message(data)
        result.native = data if self.restore is None else restored_message(data, self.restore)
        return result

    def stream_translator(self) -> RawEvents:  # type: ignore[override]
        return RawEvents(restores=self.restore is not None)
