"""The Messages surface's answers when the deployment is Anthropic's: the provider's own body and events, kept.

A natively passed-through request (``proxy.upstream.passthrough``) is answered with what Anthropic sent:
every content block (``thinking`` with its ``signature``, ``redacted_thinking``, text, tool use, server tool
results), ``stop_reason``, ``stop_sequence``, ``container``, … unchanged; only ``id`` (the gateway's), ``model``
(the alias) and ``usage`` (the settled counts, over the provider's own usage fields such as ``cache_creation``
and ``service_tier``) are the gateway's, and ``x_farebox`` is added. ``render`` does it for a body,
``NativeEncoder`` for a stream: each event is written as it arrived but ``message_start`` (id and model
rewritten), and the provider's ``message_delta`` and ``message_stop`` are held back and written once the
request is settled, the delta carrying the settled usage. When the provider saw the privacy policy's
placeholders, text and tool-input deltas are restored as they stream (a ``StreamRestorer`` per block, what it
holds back released before the block's ``content_block_stop``; thinking deltas are the model's own and kept).
Pure.
"""

from __future__ import annotations

from typing import Any, Iterable

import orjson

from ledger.usage import TokenUsage
from proxy.api.messages.response import error_body, usage_of
from proxy.errors import GatewayError
from proxy.privacy.redact import Redaction, StreamRestorer
from proxy.upstream.passthrough import RawEvents

_RESTORED = {"text_delta": ("text", False), "input_json_delta": ("partial_json", True)}


def _usage(provider: object, usage: TokenUsage) -> dict[str, Any]:
    return {**(provider if isinstance(provider, dict) else {}), **usage_of(usage)}


def render(data: dict[str, Any], usage: TokenUsage, message_id: str, alias: str, x_farebox: dict[str, Any]
           ) -> dict[str, Any]:
    return {**data, "id": message_id, "model": alias, "usage": _usage(data.get("usage"), usage),
            "x_farebox": x_farebox}


def _event(kind: str, data: bytes) -> bytes:
    return (b"event: " + kind.encode() + b"\n" if kind else b"") + b"data: " + data + b"\n\n"


class NativeEncoder:
    """Anthropic's events out as they came in (see the module docstring); one per streamed request."""

    heartbeat = _event("ping", b'{"type": "ping"}')

    def __init__(self, source: RawEvents, message_id: str, alias: str, tap: Any = None,
                 redaction: Redaction | None = None) -> None:
        self.source, self.message_id, self.alias, self.tap = source, message_id, alias, tap
        self.delta: dict[str, Any] | None = None  # the provider's message_delta, held for the tail
        self.redaction = redaction
        self.restorers: dict[Any, tuple[StreamRestorer, str, str]] = {}  # block index -> (restorer, field, type)

    def encode(self, chunks: Iterable[dict[str, Any]]) -> bytes:
        if self.tap is not None:  # the response cache keeps the chat-shaped answer, as for any surface
            self.tap.add(list(chunks))
        out = []
        for event in self.source.take():
            kind = event.event or ""
            if kind in ("message_delta", "message_stop"):
                if kind == "message_delta":
                    self.delta = _object(event.data)
                continue
            data = event.data.encode()
            if self.redaction is not None and kind in ("content_block_delta", "content_block_stop"):
                out.append(self._restored(kind, event.data))
                continue
            if kind == "message_start":
                start = _object(event.data)
                message = start.get("message") if isinstance(start.get("message"), dict) else {}
                start["message"] = {**message, "id": self.message_id, "model": self.alias}
                data = orjson.dumps(start)
            out.append(_event(kind, data))
        return b"".join(out)

    def _restored(self, kind: str, raw: str, broken: bool = False) -> bytes:
        """A delta with placeholders restored (a tail that may still become one held back), or a block's stop
        preceded by what its restorer still holds."""
        data = _object(raw)
        index = data.get("index")
        if kind == "content_block_stop":
            return self._release(index, broken) + _event(kind, raw.encode())
        delta = data.get("delta") if isinstance(data.get("delta"), dict) else {}
        field, as_json = _RESTORED.get(delta.get("type"), (None, False))
        if field is None or not isinstance(delta.get(field), str):
            return _event(kind, raw.encode())
        assert self.redaction is not None
        restorer = self.restorers.setdefault(index, (StreamRestorer(self.redaction, as_json), field, delta["type"]))
        delta[field] = restorer[0].feed(delta[field])
        return _event(kind, orjson.dumps(data))

    def _release(self, index: Any, broken: bool) -> bytes:
        held = self.restorers.pop(index, None)
        if held is None:
            return b""
        restorer, field, kind = held
        tail = restorer.flush(broken)
        if not tail:
            return b""
        return _event("content_block_delta", orjson.dumps({"type": "content_block_delta", "index": index,
                                                           "delta": {"type": kind, field: tail}}))

    def tail(self, usage: TokenUsage, x_farebox: dict[str, Any], include_usage: bool) -> bytes:
        head = self.encode(())
        delta = self.delta or {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}}
        delta = {**delta, "usage": _usage(delta.get("usage"), usage), "x_farebox": x_farebox}
        return (head + _event("message_delta", orjson.dumps(delta))
                + _event("message_stop", b'{"type": "message_stop"}'))

    def error(self, exc: GatewayError) -> bytes:
        held = b"".join(self._release(index, True) for index in list(self.restorers))  # a cut placeholder: dropped
        return self.encode(()) + held + _event("error", orjson.dumps({"type": "error", "error": error_body(exc)["error"]}))

    async def settled(self) -> None:
        return None


def _object(data: str) -> dict[str, Any]:
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
