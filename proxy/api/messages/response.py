"""The Anthropic Messages surface's answers: a chat answer rendered as a Message, chat chunks as Messages events.

``message_of`` renders the gateway's chat completion (whatever dialect served it) as a Messages response;
``MessagesEncoder`` is the stream relay's encoder for this surface (``proxy.upstream.streaming.Encoder``): a
state machine over chat chunks that writes ``message_start``, ``content_block_start`` / ``_delta`` /
``_stop`` for each text or tool-use block, and, once the request is settled, ``message_delta`` (stop reason
and the final usage) and ``message_stop``; ``ping`` for upstream silence; an ``error`` event on failure.

Usage is written as Anthropic counts it: ``input_tokens`` is uncached input only, beside
``cache_read_input_tokens`` and ``cache_creation_input_tokens``; ``output_tokens`` includes reasoning.
Pure.
"""

from __future__ import annotations

from typing import Any, Iterable

import orjson

from ledger.usage import TokenUsage
from proxy.errors import GatewayError

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "content_filter": "refusal",
                "function_call": "tool_use"}

# Anthropic's error type for each status it documents (529: overloaded).
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
               403: "permission_error", 404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
               500: "api_error", 502: "api_error", 503: "overloaded_error", 504: "timeout_error",
               529: "overloaded_error"}


def error_status(exc: GatewayError) -> int:
    """The status this surface answers with: Anthropic says 529 for overloaded."""
    return 529 if exc.status == 503 else exc.status


def error_body(exc: GatewayError) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}}``; farebox's own code rides along for the curious."""
    kind = ERROR_TYPES.get(exc.status) or ("invalid_request_error" if exc.status < 500 else "api_error")
    error: dict[str, Any] = {"type": kind, "message": exc.message}
    if exc.code:
        error["farebox_code"] = exc.code
    return {"type": "error", "error": error}


def usage_of(usage: TokenUsage) -> dict[str, Any]:
    return {"input_tokens": usage.input, "cache_creation_input_tokens": usage.cache_write,
            "cache_read_input_tokens": usage.cached_input, "output_tokens": usage.output + usage.reasoning,
            "cache_creation": {"ephemeral_5m_input_tokens": usage.cache_write - usage.cache_write_1h,
                               "ephemeral_1h_input_tokens": usage.cache_write_1h}}


def message_of(completion: dict[str, Any], usage: TokenUsage, message_id: str, alias: str) -> dict[str, Any]:
    """A chat completion body as a Messages response."""
    choice = (completion.get("choices") or [{}])[0]
    msg = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    text = msg.get("content")
    if isinstance(text, str) and text:
        content.append({"type": "text", "text": text})
    for call in msg.get("tool_calls") or ():
        fn = call.get("function") or {}
        content.append({"type": "tool_use", "id": call.get("id"), "name": fn.get("name"), "input": _input(fn)})
    return {"id": message_id, "type": "message", "role": "assistant", "model": alias, "content": content,
            "stop_reason": STOP_REASONS.get(choice.get("finish_reason") or "stop", "end_turn"),
            "stop_sequence": None, "usage": usage_of(usage), "x_farebox": completion.get("x_farebox")}


def _input(fn: dict[str, Any]) -> Any:
    try:
        value = orjson.loads(fn.get("arguments") or "{}")
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _event(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **data}) + b"\n\n"


class MessagesEncoder:
    """Chat chunks in, Messages events out; one per streamed request."""

    heartbeat = _event("ping", {})

    def __init__(self, message_id: str, alias: str, tap: Any = None) -> None:
        self.message_id, self.alias, self.tap = message_id, alias, tap
        self.started = False
        self.block: int | None = None  # index of the open content block
        self.kind: str | None = None  # its type: text | tool_use
        self.next_index = 0
        self.tools: dict[int, int] = {}  # chat tool_calls index -> block index
        self.stop_reason = "end_turn"

    def _start(self) -> bytes:
        if self.started:
            return b""
        self.started = True
        return _event("message_start", {"message": {
            "id": self.message_id, "type": "message", "role": "assistant", "model": self.alias, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}})

    def _close(self) -> bytes:
        if self.block is None:
            return b""
        out, self.block, self.kind = _event("content_block_stop", {"index": self.block}), None, None
        return out

    def _open(self, kind: str, block: dict[str, Any]) -> bytes:
        out = self._close()
        self.block, self.kind = self.next_index, kind
        self.next_index += 1
        return out + _event("content_block_start", {"index": self.block, "content_block": block})

    def encode(self, chunks: Iterable[dict[str, Any]]) -> bytes:
        if self.tap is not None:
            chunks = list(chunks)
            self.tap.add(chunks)
        out = [self._start()]
        for chunk in chunks:
            for choice in chunk.get("choices") or ():
                if choice.get("index", 0) != 0:
                    continue
                out.append(self._delta(choice.get("delta") or {}))
                if choice.get("finish_reason"):
                    self.stop_reason = STOP_REASONS.get(choice["finish_reason"], "end_turn")
        return b"".join(out)

    def _delta(self, delta: dict[str, Any]) -> bytes:
        out = []
        text = delta.get("content")
        if isinstance(text, str) and text:
            if self.kind != "text":
                out.append(self._open("text", {"type": "text", "text": ""}))
            out.append(_event("content_block_delta", {"index": self.block,
                                                      "delta": {"type": "text_delta", "text": text}}))
        for call in delta.get("tool_calls") or ():
            at = call.get("index", 0)
            fn = call.get("function") or {}
            if at not in self.tools:
                out.append(self._open("tool_use", {"type": "tool_use", "id": call.get("id"), "name": fn.get("name"),
                                                   "input": {}}))
                self.tools[at] = self.block  # type: ignore[assignment]
            fragment = fn.get("arguments")
            if isinstance(fragment, str) and fragment and self.tools[at] == self.block:
                out.append(_event("content_block_delta", {"index": self.block, "delta": {
                    "type": "input_json_delta", "partial_json": fragment}}))
        return b"".join(out)

    def tail(self, usage: TokenUsage, x_farebox: dict[str, Any], include_usage: bool) -> bytes:
        """The settled end: the last block closed, the stop reason and final usage, then message_stop."""
        return (self._start() + self._close()
                + _event("message_delta", {"delta": {"stop_reason": self.stop_reason, "stop_sequence": None},
                                           "usage": usage_of(usage), "x_farebox": x_farebox})
                + _event("message_stop", {}))

    def error(self, exc: GatewayError) -> bytes:
        return _event("error", {"error": error_body(exc)["error"]})

    async def settled(self) -> None:
        return None
