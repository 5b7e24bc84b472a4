"""Gemini ``GenerateContentResponse`` (whole or streamed as SSE chunks) and errors -> OpenAI shapes and classes.

A stream (``:streamGenerateContent?alt=sse``) is a sequence of partial responses, each ``data:`` one JSON
object; the one with a ``finishReason`` carries the final ``usageMetadata``; there is no ``[DONE]``: the body
simply ends (``GeminiSSEParser`` adds an end event so a stream that finished is told from one cut short).
Thought parts (``thought: true``) are not relayed; their tokens are billed as reasoning. A prompt the safety
filters block (``promptFeedback.blockReason``, no candidates) is a content-policy rejection; a candidate
stopped by them (``SAFETY``, ``RECITATION``, ``PROHIBITED_CONTENT``…) ends with ``content_filter``.
Vertex AI names the tier that served a request in ``usageMetadata.trafficType`` (``TRAFFIC_TIERS``).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping

import orjson

from ledger.usage import TokenUsage
from proxy.errors import UpstreamError, UpstreamUnavailable
from proxy.upstream.base import ChatResult, SSEEvent, StreamState, chunk
from proxy.upstream.classify import classify, short_reason
from proxy.upstream.sse import SSEParser
from proxy.upstream.usage_check import gemini_usage, with_tier

PROVIDER = "gemini"
END = "gemini.end-of-body"

FINISH = {
    "STOP": "stop", "MAX_TOKENS": "length", "SAFETY": "content_filter", "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter", "PROHIBITED_CONTENT": "content_filter", "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter", "LANGUAGE": "stop", "OTHER": "stop", "MALFORMED_FUNCTION_CALL": "stop",
    "UNEXPECTED_TOOL_CALL": "stop", "FINISH_REASON_UNSPECIFIED": "stop",
}  # fmt: skip
# google.rpc status names and the HTTP status each maps to (for in-stream errors).
STATUS = {"INVALID_ARGUMENT": 400, "FAILED_PRECONDITION": 400, "OUT_OF_RANGE": 400, "UNAUTHENTICATED": 401,
          "PERMISSION_DENIED": 403, "NOT_FOUND": 404, "RESOURCE_EXHAUSTED": 429, "CANCELLED": 499,
          "INTERNAL": 500, "UNKNOWN": 500, "UNAVAILABLE": 503, "DEADLINE_EXCEEDED": 504}
# Vertex AI's ``usageMetadata.trafficType``: the tier that served the request (ON_DEMAND is the standard one).
TRAFFIC_TIERS = {"ON_DEMAND_PRIORITY": "priority", "ON_DEMAND_FLEX": "flex", "PROVISIONED_THROUGHPUT": "provisioned"}
_CONTEXT = re.compile(r"input token count.*exceeds the maximum|exceeds the maximum number of tokens", re.I)
_DELAY = re.compile(r"^(\d+(?:\.\d+)?)s$")


def _retry_delay(err: Mapping) -> str | None:
    """Seconds from a ``google.rpc.RetryInfo`` detail (``"retryDelay": "17s"``)."""
    for detail in err.get("details") or ():
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("google.rpc.RetryInfo"):
            match = _DELAY.match(str(detail.get("retryDelay", "")))
            if match:
                return match.group(1)
    return None


def _reason(err: Mapping) -> str | None:
    """The ``google.rpc.ErrorInfo`` reason of an error, if it has one."""
    for detail in err.get("details") or ():
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("google.rpc.ErrorInfo"):
            return short_reason(detail.get("reason"))
    return None


def error_from(payload: Mapping, status: int | None, headers: Mapping[str, str]) -> UpstreamError:
    err = payload.get("error") if isinstance(payload.get("error"), dict) else {}
    reason = short_reason(err.get("status"))
    message = err.get("message") if isinstance(err.get("message"), str) else ""
    if status is None:
        code = err.get("code")
        status = code if type(code) is int and 400 <= code <= 599 else STATUS.get(reason or "", 500)
    if status == 400 and _reason(err) == "API_KEY_INVALID":  # Google answers a bad key with a 400
        status = 401
    delay = _retry_delay(err)
    if delay is not None and not any(k.lower().startswith("retry-after") for k in headers):
        headers = {**headers, "retry-after": delay}
    return classify(PROVIDER, status, reason=reason, message=message, headers=headers,
                    context_length=status == 400 and bool(_CONTEXT.search(message)),
                    policy="safety" in message.lower() and status == 400)


def _blocked(data: Mapping) -> UpstreamError | None:
    feedback = data.get("promptFeedback")
    reason = feedback.get("blockReason") if isinstance(feedback, dict) else None
    if reason and not data.get("candidates"):
        return classify(PROVIDER, 400, reason=short_reason(reason), message=f"The prompt was blocked ({reason}).",
                        policy=True)
    return None


def _finish(raw: object, calls: bool) -> str | None:
    if not isinstance(raw, str):
        return None
    mapped = FINISH.get(raw, "stop")
    return "tool_calls" if calls and mapped == "stop" else mapped


def _call_id(call: Mapping) -> str:
    given = call.get("id")
    return given if isinstance(given, str) and given else "call_" + uuid.uuid4().hex[:24]


def _candidate(data: Mapping) -> Mapping:
    candidates = data.get("candidates")
    if isinstance(candidates, list) and candidates and isinstance(candidates[0], dict):
        return candidates[0]
    return {}


def _parts(candidate: Mapping) -> list:
    content = candidate.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    return parts if isinstance(parts, list) else []


def usage_of(meta: object) -> TokenUsage:
    """A ``usageMetadata``'s tokens, marked with the tier its ``trafficType`` names (none: the standard tier)."""
    traffic = meta.get("trafficType") if isinstance(meta, Mapping) else None
    return with_tier(gemini_usage(meta), TRAFFIC_TIERS.get(traffic) if isinstance(traffic, str) else None)


def parse_generate(data: dict) -> ChatResult:
    """A ``generateContent`` answer as an OpenAI completion body."""
    if isinstance(data.get("error"), dict):
        raise error_from(data, None, {})
    blocked = _blocked(data)
    if blocked is not None:
        raise blocked
    candidate = _candidate(data)
    if not candidate:
        raise UpstreamUnavailable(f"Upstream ({PROVIDER}) sent an answer without candidates.", upstream_status=200)
    texts: list[str] = []
    calls: list[dict] = []
    for part in _parts(candidate):
        if not isinstance(part, dict) or part.get("thought") is True:
            continue
        if isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif isinstance(part.get("functionCall"), dict):
            call = part["functionCall"]
            calls.append({"id": _call_id(call), "type": "function",
                          "function": {"name": call.get("name"), "arguments": orjson.dumps(call.get("args") or {}).decode()}})
    msg: dict = {"role": "assistant", "content": "".join(texts) if texts or not calls else None, "refusal": None}
    if calls:
        msg["tool_calls"] = calls
    finish = _finish(candidate.get("finishReason"), bool(calls)) or "stop"
    usage = usage_of(data.get("usageMetadata"))
    body = {"choices": [{"index": 0, "message": msg, "logprobs": None, "finish_reason": finish}],
            "usage": usage.to_openai()}
    return ChatResult(body=body, usage=usage, finish_reason=finish)


class GeminiSSEParser(SSEParser):
    """SSE, plus an ``END`` event when the body ends (Gemini streams have no terminal event of their own)."""

    __slots__ = ()

    def close(self) -> list[SSEEvent]:
        return [*super().close(), SSEEvent(event=END, data="")]


class GeminiStreamTranslator:
    """One ``streamGenerateContent`` SSE stream, chunk by chunk."""

    def __init__(self) -> None:
        self.usage: TokenUsage | None = None
        self.finish_reason: str | None = None
        self.done = False
        self._state = StreamState()
        self._started = False
        self._calls = 0

    def feed(self, event: SSEEvent) -> list[dict]:
        if event.event == END:
            self.done = self.finish_reason is not None
            return []
        text = event.data.strip()
        if not text:
            return []
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError:
            raise UpstreamUnavailable(f"Upstream ({PROVIDER}) sent a stream event that is not JSON.",
                                      upstream_status=200) from None
        if not isinstance(data, dict):
            return []
        if isinstance(data.get("error"), dict):
            raise error_from(data, None, {})
        blocked = _blocked(data)
        if blocked is not None:
            raise blocked
        if data.get("usageMetadata") is not None:
            self.usage = usage_of(data["usageMetadata"])
        out: list[dict] = []
        if not self._started:
            self._started = True
            out.append(chunk({"role": "assistant", "content": ""}))
        candidate = _candidate(data)
        for part in _parts(candidate):
            if not isinstance(part, dict) or part.get("thought") is True:
                continue
            if isinstance(part.get("text"), str) and part["text"]:
                self._state.emitted(part["text"])
                out.append(chunk({"content": part["text"]}))
            elif isinstance(part.get("functionCall"), dict):
                out.extend(self._call(part["functionCall"]))
        finish = _finish(candidate.get("finishReason"), self._calls > 0)
        if finish is not None:
            self.finish_reason = finish
            out.append(chunk({}, finish))
            if self.usage is not None:
                self.done = True  # the final chunk: finish reason and final usage together
        return out

    def _call(self, call: Mapping) -> list[dict]:
        """Gemini sends each function call whole: a delta naming it (empty arguments, as OpenAI's first delta
        is), then one with all its arguments."""
        arguments = orjson.dumps(call.get("args") or {}).decode()
        self._state.emitted(arguments)
        index, self._calls = self._calls, self._calls + 1
        head = {"index": index, "id": _call_id(call), "type": "function", "function": {"name": call.get("name"),
                                                                                      "arguments": ""}}
        return [chunk({"tool_calls": [head]}),
                chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]})]

    def text_so_far(self) -> str:
        return self._state.joined()
