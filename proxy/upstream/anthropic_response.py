"""Anthropic Messages responses -> OpenAI completions and chunks.

The stream translator is a state machine over the Messages SSE events::

    message_start -> (content_block_start -> content_block_delta* -> content_block_stop)*
                  -> message_delta+ -> message_stop        (ping anywhere, error anywhere)

Each event yields its chunks as it arrives; nothing is buffered to the end.
Tool blocks are numbered among tool blocks only (OpenAI's ``tool_calls``
index); the reserved JSON-mode tool's input becomes plain content instead.
"""

from __future__ import annotations

from typing import Mapping

import orjson

from ledger.usage import TokenUsage
from proxy.errors import UpstreamError, UpstreamUnavailable
from proxy.upstream.anthropic_request import JSON_TOOL
from proxy.upstream.base import ChatResult, SSEEvent, StreamState, chunk
from proxy.upstream.classify import classify, short_reason
from proxy.upstream.usage_check import UNREPORTED, InvalidUsage, count, details, invalid, served_tier

PROVIDER = "anthropic"

STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}

# The HTTP status Anthropic documents for each error type (used for in-stream errors).
ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}

# "prompt is too long: N tokens > M maximum"; "input length and `max_tokens` exceed context limit: ..."
_CONTEXT_SIGNALS = ("prompt is too long", "exceed context limit", "context window")
_POLICY_SIGNALS = ("content filtering policy", "usage policy", "content policy", "acceptable use")


def finish_reason(stop_reason: str | None, *, json_mode: bool) -> str | None:
    if stop_reason is None:
        return None
    if json_mode and stop_reason == "tool_use":
        return "stop"  # the forced JSON tool is the answer, not a call for the caller
    return STOP_REASONS.get(stop_reason, "stop")


def usage_from(raw: Mapping, base: TokenUsage | None = None) -> TokenUsage:
    """Anthropic usage (disjoint already) as ours; fields absent (or null) in ``raw`` keep ``base``. The
    one-hour writes (``cache_creation.ephemeral_1h_input_tokens``) are ``cache_write_1h``, part of
    ``cache_write``.

    Checked at the boundary (``proxy.upstream.usage_check``): any count that is not a non-negative
    integer makes the whole usage invalid (so does a TTL split that does not add up to the writes), and an
    invalid ``base`` stays invalid."""
    base = base or TokenUsage()
    if base.source == "provider_invalid":
        return base

    def pick(key: str, current: int) -> int:
        return current if raw.get(key) is None else count(raw, key)

    try:
        write = pick("cache_creation_input_tokens", base.cache_write)
        write_1h = base.cache_write_1h
        split = details(raw, "cache_creation")
        if split:
            five, hour = count(split, "ephemeral_5m_input_tokens"), count(split, "ephemeral_1h_input_tokens")
            if five + hour != write:
                raise InvalidUsage("cache_creation does not add up to cache_creation_input_tokens")
            write_1h = hour
        if write_1h > write:
            raise InvalidUsage("one-hour cache writes exceed the cache writes")
        return TokenUsage(
            input=pick("input_tokens", base.input),
            cached_input=pick("cache_read_input_tokens", base.cached_input),
            cache_write=write,
            output=pick("output_tokens", base.output),
            cache_write_1h=write_1h,
            service_tier=served_tier(raw["service_tier"]) if "service_tier" in raw else base.service_tier,
        )
    except InvalidUsage:
        return invalid(raw)


def error_from(payload: Mapping, status: int | None, headers: Mapping[str, str]) -> UpstreamError:
    """Classify an Anthropic error body or ``error`` event (``{"type":"error","error":{...}}``)."""
    err = payload.get("error") if isinstance(payload.get("error"), dict) else {}
    etype = short_reason(err.get("type"))
    message = err.get("message") if isinstance(err.get("message"), str) else ""
    lowered = message.lower()
    if status is None:
        status = ERROR_STATUS.get(etype or "", 500)
    return classify(
        PROVIDER,
        status,
        reason=etype,
        message=message,
        headers=headers,
        context_length=any(signal in lowered for signal in _CONTEXT_SIGNALS),
        policy=any(signal in lowered for signal in _POLICY_SIGNALS),
    )


def parse_message(data: dict) -> ChatResult:
    """A non-streaming Messages response as an OpenAI completion body; an error object in it raises."""
    if data.get("type") == "error" or (data.get("error") is not None and "content" not in data):
        raise error_from(data, None, {})
    if not isinstance(data.get("content"), list):
        raise UpstreamUnavailable(f"Upstream ({PROVIDER}) sent a message without content.", upstream_status=200)
    texts: list[str] = []
    calls: list[dict] = []
    json_mode = False
    for block in data["content"]:
        if not isinstance(block, dict):
            raise UpstreamUnavailable(f"Upstream ({PROVIDER}) sent a content block that is not an object.",
                                      upstream_status=200)
        kind = block.get("type")
        if kind == "text":
            texts.append(block.get("text") or "")
        elif kind == "tool_use" and block.get("name") == JSON_TOOL:
            json_mode = True
            texts.append(orjson.dumps(block.get("input") or {}).decode())
        elif kind == "tool_use":
            arguments = orjson.dumps(block.get("input") or {}).decode()
            calls.append({"id": block.get("id"), "type": "function", "function": {"name": block.get("name"), "arguments": arguments}})
        # thinking / redacted_thinking / server tool blocks are not requested; skip them.
    message: dict = {"role": "assistant", "content": "".join(texts) if texts or not calls else None, "refusal": None}
    if calls:
        message["tool_calls"] = calls
    finish = finish_reason(data.get("stop_reason"), json_mode=json_mode and not calls)
    raw = data.get("usage")
    usage = usage_from(raw) if isinstance(raw, dict) else UNREPORTED if raw is None else invalid(raw)
    body: dict = {"choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}]}
    body["usage"] = usage.to_openai()
    return ChatResult(body=body, usage=usage, finish_reason=finish)


class AnthropicStreamTranslator:
    """One Messages stream, translated event by event."""

    def __init__(self) -> None:
        self.usage: TokenUsage | None = None
        self.finish_reason: str | None = None
        self.done = False
        self._state = StreamState()
        self._tools: dict[int, int] = {}  # content block index -> tool_calls index
        self._json_blocks: set[int] = set()

    def feed(self, event: SSEEvent) -> list[dict]:
        try:
            data = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            raise UpstreamUnavailable(
                f"Upstream ({PROVIDER}) sent a stream event that is not JSON.", upstream_status=200
            ) from None
        if not isinstance(data, dict):
            return []
        kind = data.get("type") or event.event
        handler = self._HANDLERS.get(kind or "")
        return handler(self, data) if handler else []  # ping and future event types: nothing

    def text_so_far(self) -> str:
        return self._state.joined()

    def _message_start(self, data: dict) -> list[dict]:
        usage = (data.get("message") or {}).get("usage")
        if isinstance(usage, dict):
            self.usage = usage_from(usage)
        elif usage is not None:
            self.usage = invalid(usage)
        return [chunk({"role": "assistant", "content": ""})]

    def _block_start(self, data: dict) -> list[dict]:
        index, block = data.get("index", 0), data.get("content_block") or {}
        if block.get("type") == "text":
            return self._content(block.get("text") or "")
        if block.get("type") != "tool_use":
            return []
        if block.get("name") == JSON_TOOL:
            self._json_blocks.add(index)
            return []
        ordinal = self._tools[index] = len(self._tools)
        call = {"index": ordinal, "id": block.get("id"), "type": "function", "function": {"name": block.get("name"), "arguments": ""}}
        return [chunk({"tool_calls": [call]})]

    def _block_delta(self, data: dict) -> list[dict]:
        index, delta = data.get("index", 0), data.get("delta") or {}
        kind = delta.get("type")
        if kind == "text_delta":
            return self._content(delta.get("text") or "")
        if kind != "input_json_delta":
            return []  # thinking, signature and citation deltas are not relayed
        fragment = delta.get("partial_json") or ""
        if index in self._json_blocks:
            return self._content(fragment)
        if index not in self._tools or not fragment:
            return []
        self._state.emitted(fragment)
        return [chunk({"tool_calls": [{"index": self._tools[index], "function": {"arguments": fragment}}]})]

    def _content(self, text: str) -> list[dict]:
        if not text:
            return []
        self._state.emitted(text)
        return [chunk({"content": text})]

    def _message_delta(self, data: dict) -> list[dict]:
        usage = data.get("usage")
        if isinstance(usage, dict):
            self.usage = usage_from(usage, self.usage)  # output_tokens is cumulative
        elif usage is not None:
            self.usage = invalid(usage)
        stop = (data.get("delta") or {}).get("stop_reason")
        if stop is None:
            return []
        self.finish_reason = finish_reason(stop, json_mode=bool(self._json_blocks) and not self._tools)
        return [chunk({}, self.finish_reason)]

    def _message_stop(self, data: dict) -> list[dict]:
        self.done = True
        return []

    def _error(self, data: dict) -> list[dict]:
        raise error_from(data, None, {})

    _HANDLERS = {
        "message_start": _message_start,
        "content_block_start": _block_start,
        "content_block_delta": _block_delta,
        "message_delta": _message_delta,
        "message_stop": _message_stop,
        "error": _error,
    }
