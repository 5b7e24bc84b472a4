"""The OpenAI Responses API passed through: a Responses request to an OpenAI deployment that serves it itself.

A deployment of the ``openai`` dialect with the ``responses`` capability answers ``POST /v1/responses``. A
Responses request goes to it as the client wrote it, so nothing is lost to a chat translation: built-in tools,
``namespace`` tool groups, reasoning items with their encrypted content passed back, ``include``,
``prompt_cache_key``. ``NativeResponses`` is the ``Dialect`` of such an attempt: the client's body with the
deployment's ``model``, the plan's ``max_output_tokens`` and the conversation farebox continues
(``previous_response_id`` resolved by farebox: the provider gets the whole input); the answer is read into a
chat-shaped result as well (text, function calls; usage through the usage boundary: ``responses_usage``), for
the caches, estimates and metering every surface shares, and the provider's own response object or events are
kept for the client (``ChatResult.native``; ``ResponsesEvents``). Errors are OpenAI's.

When the privacy policy redacts for the deployment, ``redact`` puts the scanned chat body's placeholders into
every text the provider reads (instructions, message texts, function-call arguments and outputs), never into a
reasoning item (the model's own, encrypted); ``restore`` puts the values back into the answer's text and
function-call arguments (streams: ``proxy.api.responses.native`` restores the deltas). Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson

from ledger.usage import TokenUsage
from proxy.errors import UpstreamUnavailable
from proxy.snapshot import Deployment
from proxy.upstream.base import ChatResult, SSEEvent, StreamState, UpstreamRequest
from proxy.upstream.openai_chat import OpenAIChatDialect, error_from, headers
from proxy.upstream.usage_check import UNREPORTED, responses_usage, with_tier

FINISHED = ("response.completed", "response.incomplete")
Rewrite = Callable[[str], str]


def _parts(content: Any, rewrite: Rewrite) -> Any:
    if isinstance(content, str):
        return rewrite(content)
    if not isinstance(content, list):
        return content
    return [{**part, "text": rewrite(part["text"])} if isinstance(part, dict) and isinstance(part.get("text"), str)
            else part for part in content]


def redacted_body(body: Mapping[str, Any], redact: Rewrite) -> dict[str, Any]:
    """A copy of a Responses body with ``redact`` applied to every text the provider reads but reasoning."""
    out = dict(body)
    if isinstance(out.get("instructions"), str):
        out["instructions"] = redact(out["instructions"])
    raw = out.get("input")
    if isinstance(raw, str):
        out["input"] = redact(raw)
    elif isinstance(raw, list):
        items = []
        for item in raw:
            kind = item.get("type", "message") if isinstance(item, dict) else None
            if kind == "message":
                item = {**item, "content": _parts(item.get("content"), redact)}
            elif kind == "function_call" and isinstance(item.get("arguments"), str):
                item = {**item, "arguments": redact(item["arguments"])}
            elif kind == "function_call_output":
                item = {**item, "output": _parts(item.get("output"), redact)}
            items.append(item)
        out["input"] = items
    return out


def restored_item(item: Any, restore: Callable[..., str]) -> Any:
    """An output item with ``restore`` applied to its text or arguments (reasoning left as it came)."""
    if not isinstance(item, dict):
        return item
    if item.get("type") == "message":
        return {**item, "content": _parts(item.get("content"), restore)}
    if item.get("type") == "function_call" and isinstance(item.get("arguments"), str):
        return {**item, "arguments": restore(item["arguments"], True)}
    return item


def restored_response(data: dict[str, Any], restore: Callable[..., str]) -> dict[str, Any]:
    output = data.get("output")
    return {**data, "output": [restored_item(i, restore) for i in output]} if isinstance(output, list) else data


def _chat_body(output: Any, status: str | None, incomplete: Any) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for item in output if isinstance(output, list) else ():
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            for part in item.get("content") or ():
                if isinstance(part, dict) and part.get("type") == "output_text" and isinstance(part.get("text"), str):
                    texts.append(part["text"])
        elif item.get("type") == "function_call":
            calls.append({"id": item.get("call_id"), "type": "function",
                          "function": {"name": item.get("name"), "arguments": item.get("arguments") or ""}})
    reason = (incomplete or {}).get("reason") if isinstance(incomplete, dict) else None
    finish = "tool_calls" if calls else "length" if status == "incomplete" and reason == "max_output_tokens" \
        else "content_filter" if status == "incomplete" else "stop"
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if calls:
        message["tool_calls"] = calls
    return {"choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}]}


def parse_response(data: dict) -> ChatResult:
    """A Response object as a chat-shaped result; an error in it (``failed``, an error object) raises."""
    if data.get("error") is not None and data.get("object") != "response":
        raise error_from(data, None, {})
    if data.get("status") == "failed":
        raise error_from({"error": data.get("error") or {"message": "The response failed."}}, None, {})
    if not isinstance(data.get("output"), list):
        raise UpstreamUnavailable("Upstream (openai) sent a response without output.", upstream_status=200)
    body = _chat_body(data["output"], data.get("status"), data.get("incomplete_details"))
    usage = with_tier(responses_usage(data.get("usage")), data.get("service_tier"))
    return ChatResult(body=body, usage=usage, finish_reason=body["choices"][0]["finish_reason"], native=data)


class ResponsesEvents:
    """One upstream Responses stream: text and function-call deltas as chat chunks, usage from the finished
    response; every event kept as received until the encoder takes it (``take``)."""

    __slots__ = ("usage", "finish_reason", "done", "raw", "restores", "_state", "_calls")

    def __init__(self, restores: bool = False) -> None:
        self.usage: TokenUsage | None = None
        self.finish_reason: str | None = None
        self.done = False
        self.raw: list[SSEEvent] = []
        self.restores = restores
        self._state = StreamState()
        self._calls: dict[Any, int] = {}  # output index -> tool_calls index

    def feed(self, event: SSEEvent) -> list[dict]:
        try:
            data = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            raise UpstreamUnavailable("Upstream (openai) sent a stream event that is not JSON.",
                                      upstream_status=200) from None
        if not isinstance(data, dict):
            return []
        kind = data.get("type") or event.event
        if kind == "error":
            raise error_from({"error": data}, None, {})
        if kind == "response.failed":
            raise error_from({"error": (data.get("response") or {}).get("error") or {}}, None, {})
        self.raw.append(event)
        return self._chunks(kind, data)

    def _chunks(self, kind: str | None, data: dict) -> list[dict]:
        if kind == "response.output_text.delta" and isinstance(data.get("delta"), str):
            self._state.emitted(data["delta"])
            return [_chunk({"content": data["delta"]})]
        if kind == "response.output_item.added" and (data.get("item") or {}).get("type") == "function_call":
            item = data["item"]
            at = self._calls.setdefault(data.get("output_index"), len(self._calls))
            return [_chunk({"tool_calls": [{"index": at, "id": item.get("call_id"), "type": "function",
                                            "function": {"name": item.get("name"), "arguments": ""}}]})]
        if kind == "response.function_call_arguments.delta" and isinstance(data.get("delta"), str):
            at = self._calls.get(data.get("output_index"))
            if at is None:
                return []
            self._state.emitted(data["delta"])
            return [_chunk({"tool_calls": [{"index": at, "function": {"arguments": data["delta"]}}]})]
        if kind in FINISHED:
            response = data.get("response") if isinstance(data.get("response"), dict) else {}
            self.usage = (with_tier(responses_usage(response.get("usage")), response.get("service_tier"))
                          if "usage" in response else UNREPORTED)
            body = _chat_body(response.get("output"), response.get("status"), response.get("incomplete_details"))
            self.finish_reason = body["choices"][0]["finish_reason"]
            self.done = True
            return [{"choices": [{"index": 0, "delta": {}, "finish_reason": self.finish_reason}]}]
        return []

    def text_so_far(self) -> str:
        return self._state.joined()

    def take(self) -> list[SSEEvent]:
        taken, self.raw = self.raw, []
        return taken


def _chunk(delta: dict) -> dict:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


class NativeResponses(OpenAIChatDialect):
    """One Responses request's attempts on deployments that serve the Responses API (see the docstring)."""

    def __init__(self, body: Mapping[str, Any], redact: Rewrite | None = None,
                 restore: Callable[..., str] | None = None) -> None:
        self.body = body if redact is None else redacted_body(body, redact)
        self.restore = restore

    def validate(self, body: dict, deployment: Deployment) -> None:
        """Nothing to refuse: the body is the Responses API's own, and the provider checks it."""

    def chat_request(self, body: dict, deployment: Deployment, secret: str | None, *, max_output_tokens: int,
                     extra_headers: Mapping[str, str] | None = None) -> UpstreamRequest:
        out = {**self.body, "model": deployment.model, "max_output_tokens": max_output_tokens}
        return UpstreamRequest(url=deployment.base_url.rstrip("/") + "/responses",
                               headers=headers(secret, extra_headers, stream=self.body.get("stream") is True),
                               body=orjson.dumps(out))

    def parse_chat(self, data: dict) -> ChatResult:
        result = parse_response(data)
        if self.restore is not None:
            result.native = restored_response(data, self.restore)
        return result

    def stream_translator(self) -> ResponsesEvents:  # type: ignore[override]
        return ResponsesEvents()
