"""Bedrock ``Converse`` answers, ``ConverseStream`` events and errors -> OpenAI completions, chunks, classes.

The stream is a sequence of named events (``proxy.upstream.bedrock.eventstream``)::

    messageStart -> (contentBlockStart? -> contentBlockDelta* -> contentBlockStop)* -> messageStop -> metadata

``metadata`` carries the usage (and ``serviceTier``, the tier that served it, as the answer does) and ends the
stream. Tool blocks are numbered among tool blocks (OpenAI's
``tool_calls`` index); the reserved JSON-mode tool's input becomes plain content. Bedrock pads event payloads
with a ``p`` field; unknown fields and events are ignored. Errors are classified by their AWS exception name
(the ``x-amzn-ErrorType`` header, the body's ``__type``, or the stream's ``:exception-type``).
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from ledger.usage import TokenUsage
from proxy.errors import UpstreamError, UpstreamUnavailable
from proxy.upstream.base import ChatResult, SSEEvent, StreamState, chunk
from proxy.upstream.bedrock.eventstream import EXCEPTION
from proxy.upstream.bedrock.request import JSON_TOOL
from proxy.upstream.classify import classify, header, short_reason
from proxy.upstream.usage_check import UNREPORTED, bedrock_usage, with_tier

PROVIDER = "bedrock"

STOP_REASONS = {
    "end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "model_context_window_exceeded": "length",
    "tool_use": "tool_calls", "guardrail_intervened": "content_filter", "content_filtered": "content_filter",
}  # fmt: skip

# The HTTP status AWS documents for each exception (in-stream exceptions carry no status of their own).
EXCEPTION_STATUS = {
    "ValidationException": 400, "AccessDeniedException": 403, "UnrecognizedClientException": 403,
    "ExpiredTokenException": 403, "InvalidSignatureException": 403, "ResourceNotFoundException": 404,
    "ModelTimeoutException": 408, "ModelErrorException": 424, "ThrottlingException": 429,
    "ServiceQuotaExceededException": 429, "ModelNotReadyException": 429, "InternalServerException": 500,
    "ModelStreamErrorException": 500, "ServiceUnavailableException": 503,
}  # fmt: skip
# Quota and not-ready are capacity (retry elsewhere, respect Retry-After); AWS sends some of them as 400.
_CAPACITY = frozenset({"ThrottlingException", "ServiceQuotaExceededException", "ModelNotReadyException"})
_TRANSIENT = frozenset({"ModelErrorException", "ModelTimeoutException", "ModelStreamErrorException"})
_CONTEXT_SIGNALS = ("too many input tokens", "input is too long", "prompt is too long", "context window",
                    "too many total text bytes")


def _exception_name(raw: object) -> str | None:
    """``ThrottlingException`` from ``ThrottlingException:http://…`` or ``com.amazon…#ThrottlingException``."""
    if not isinstance(raw, str) or not raw:
        return None
    name = raw.split(":", 1)[0].rsplit("#", 1)[-1]
    return short_reason(name[:1].upper() + name[1:]) if name else None


def error_from(payload: Mapping, status: int | None, headers: Mapping[str, str],
               exception: str | None = None) -> UpstreamError:
    """Classify a Bedrock error body (``{"message"}``) or stream exception."""
    name = (_exception_name(exception) or _exception_name(header(headers, "x-amzn-errortype"))
            or _exception_name(payload.get("__type")))
    message = payload.get("message") or payload.get("Message")
    message = message if isinstance(message, str) else ""
    if status is None:
        status = EXCEPTION_STATUS.get(name or "", 500)
    if name in _CAPACITY:
        status = 429
    elif name in _TRANSIENT and status < 500:  # the model failed or timed out: another deployment may not
        status = 503
    lowered = message.lower()
    return classify(PROVIDER, status, reason=name, message=message, headers=headers,
                    context_length=status == 400 and any(s in lowered for s in _CONTEXT_SIGNALS),
                    policy="guardrail" in lowered or "content filter" in lowered)


def finish_reason(stop: object, *, json_mode: bool) -> str | None:
    if not isinstance(stop, str):
        return None
    if json_mode and stop == "tool_use":
        return "stop"
    return STOP_REASONS.get(stop, "stop")


def served_tier(data: Mapping) -> object:
    """The tier an answer (or the stream's ``metadata`` event) says served it: ``serviceTier.type``."""
    tier = data.get("serviceTier")
    return tier.get("type") if isinstance(tier, Mapping) else None


def parse_converse(data: dict) -> ChatResult:
    """A ``Converse`` answer as an OpenAI completion body."""
    output = data.get("output")
    message = output.get("message") if isinstance(output, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        if isinstance(data.get("message"), str):  # an error body in a 2xx
            raise error_from(data, None, {})
        raise UpstreamUnavailable(f"Upstream ({PROVIDER}) sent an answer without output.", upstream_status=200)
    texts: list[str] = []
    calls: list[dict] = []
    json_mode = False
    for block in content:
        if not isinstance(block, dict):
            raise UpstreamUnavailable(f"Upstream ({PROVIDER}) sent a content block that is not an object.",
                                      upstream_status=200)
        use = block.get("toolUse")
        if isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif isinstance(use, dict) and use.get("name") == JSON_TOOL:
            json_mode = True
            texts.append(orjson.dumps(use.get("input") or {}).decode())
        elif isinstance(use, dict):
            calls.append({"id": use.get("toolUseId"), "type": "function",
                          "function": {"name": use.get("name"), "arguments": orjson.dumps(use.get("input") or {}).decode()}})
        # reasoningContent and other blocks are not relayed
    msg: dict = {"role": "assistant", "content": "".join(texts) if texts or not calls else None, "refusal": None}
    if calls:
        msg["tool_calls"] = calls
    finish = finish_reason(data.get("stopReason"), json_mode=json_mode and not calls)
    usage = with_tier(bedrock_usage(data.get("usage")), served_tier(data))
    body = {"choices": [{"index": 0, "message": msg, "logprobs": None, "finish_reason": finish}],
            "usage": usage.to_openai()}
    return ChatResult(body=body, usage=usage, finish_reason=finish)


class BedrockStreamTranslator:
    """One ``ConverseStream``, translated event by event."""

    def __init__(self) -> None:
        self.usage: TokenUsage | None = None
        self.finish_reason: str | None = None
        self.done = False
        self._state = StreamState()
        self._tools: dict[int, int] = {}  # content block index -> tool_calls index
        self._json_blocks: set[int] = set()
        self._stop: str | None = None

    def feed(self, event: SSEEvent) -> list[dict]:
        try:
            data = orjson.loads(event.data) if event.data else {}
        except orjson.JSONDecodeError:
            raise UpstreamUnavailable(f"Upstream ({PROVIDER}) sent a stream event that is not JSON.",
                                      upstream_status=200) from None
        if not isinstance(data, dict):
            return []
        kind = event.event or ""
        if kind.startswith(EXCEPTION):
            raise error_from(data, None, {}, exception=kind[len(EXCEPTION):])
        handler = self._HANDLERS.get(kind)
        return handler(self, data) if handler else []

    def text_so_far(self) -> str:
        return self._state.joined()

    def _message_start(self, data: dict) -> list[dict]:
        return [chunk({"role": "assistant", "content": ""})]

    def _block_start(self, data: dict) -> list[dict]:
        index = data.get("contentBlockIndex", 0)
        use = (data.get("start") or {}).get("toolUse")
        if not isinstance(use, dict):
            return []
        if use.get("name") == JSON_TOOL:
            self._json_blocks.add(index)
            return []
        ordinal = self._tools[index] = len(self._tools)
        call = {"index": ordinal, "id": use.get("toolUseId"), "type": "function",
                "function": {"name": use.get("name"), "arguments": ""}}
        return [chunk({"tool_calls": [call]})]

    def _block_delta(self, data: dict) -> list[dict]:
        index, delta = data.get("contentBlockIndex", 0), data.get("delta") or {}
        if isinstance(delta.get("text"), str):
            return self._content(delta["text"])
        use = delta.get("toolUse")
        fragment = use.get("input") if isinstance(use, dict) else None
        if not isinstance(fragment, str) or not fragment:
            return []  # reasoning deltas are not relayed
        if index in self._json_blocks:
            return self._content(fragment)
        if index not in self._tools:
            return []
        self._state.emitted(fragment)
        return [chunk({"tool_calls": [{"index": self._tools[index], "function": {"arguments": fragment}}]})]

    def _content(self, text: str) -> list[dict]:
        if not text:
            return []
        self._state.emitted(text)
        return [chunk({"content": text})]

    def _message_stop(self, data: dict) -> list[dict]:
        self.finish_reason = finish_reason(data.get("stopReason"), json_mode=bool(self._json_blocks) and not self._tools)
        return [chunk({}, self.finish_reason or "stop")]

    def _metadata(self, data: dict) -> list[dict]:
        self.usage = with_tier(bedrock_usage(data.get("usage")), served_tier(data)) if "usage" in data else UNREPORTED
        self.done = self.finish_reason is not None
        return []

    _HANDLERS = {
        "messageStart": _message_start,
        "contentBlockStart": _block_start,
        "contentBlockDelta": _block_delta,
        "messageStop": _message_stop,
        "metadata": _metadata,
    }
