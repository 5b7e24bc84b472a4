"""The OpenAI Chat Completions dialect (OpenAI, Azure OpenAI v1, vLLM, other compatibles).

The caller already speaks this dialect, so translation is mostly stamping:
the pinned model, the output cap as ``max_completion_tokens``, and for
streams ``stream_options.include_usage`` so the provider always reports usage.
Responses lose their ``id``/``object``/``created``/``model``; the relay
stamps the gateway's own.
"""

from __future__ import annotations

from typing import Callable, Mapping

import orjson

from ledger.usage import TokenUsage
from proxy.errors import UpstreamError, UpstreamUnavailable
from proxy.snapshot import Deployment
from proxy.upstream.base import ChatResult, SSEEvent, StreamState, UpstreamRequest
from proxy.upstream.capabilities import reject_unknown, require_capabilities
from proxy.upstream.classify import classify, load_json, short_reason
from proxy.upstream.sse import SSEParser
from proxy.upstream.usage_check import openai_embedding_usage, openai_usage, with_tier

PROVIDER = "openai"

# Every top-level parameter of POST /v1/chat/completions (deprecated ones included).
KNOWN_PARAMS = frozenset({
    "messages", "model", "audio", "frequency_penalty", "function_call", "functions",
    "logit_bias", "logprobs", "max_completion_tokens", "max_tokens", "metadata",
    "modalities", "n", "parallel_tool_calls", "prediction", "presence_penalty",
    "prompt_cache_key", "prompt_cache_retention", "reasoning_effort", "response_format",
    "safety_identifier", "seed", "service_tier", "stop", "store", "stream",
    "stream_options", "temperature", "tool_choice", "tools", "top_logprobs", "top_p",
    "user", "verbosity", "web_search_options",
})  # fmt: skip

# Keys the relay stamps itself (or, for usage, reports from the translator).
_STAMPED = ("id", "object", "created", "model")
_CHUNK_DROP = (*_STAMPED, "usage")

_CONTEXT_CODES = frozenset({"context_length_exceeded", "string_above_max_length"})
_POLICY_CODES = frozenset({"content_policy_violation", "content_filter"})


def _url(base_url: str, path: str) -> str:
    return base_url.rstrip("/") + path


def headers(secret: str | None, extra: Mapping[str, str] | None, *, stream: bool) -> dict[str, str]:
    headers = dict(extra or {})  # ours win over extras: auth is never overridable
    headers["content-type"] = "application/json"
    headers["accept"] = "text/event-stream" if stream else "application/json"
    if secret:
        headers["authorization"] = f"Bearer {secret}"
    return headers


def _answer_error(data: dict, classify_error: ErrorOf) -> UpstreamError | None:
    """An error object in a 2xx body (a quirk providers really have): an upstream error, never an answer."""
    if "error" in data and data["error"] is not None and not data.get("choices") and not data.get("data"):
        return classify_error(data, None, {})
    if data.get("object") == "error":
        return classify_error(data, None, {})
    return None


def error_from(payload: dict, status: int | None, headers: Mapping[str, str], provider: str = PROVIDER
               ) -> UpstreamError:
    """Classify an OpenAI error object (``{"error": {...}}`` or vLLM's flat form)."""
    raw = payload.get("error")
    err = raw if isinstance(raw, dict) else payload
    code = short_reason(err.get("code"))
    etype = short_reason(err.get("type"))
    message = err.get("message") if isinstance(err.get("message"), str) else ""
    if isinstance(raw, str):  # some compatible servers send {"error": "text"}
        message = raw
    lowered = message.lower()
    if status is None:  # in-stream: no HTTP status, infer one from the error's own fields
        status = _stream_status(err, code, etype)
    inner = err.get("innererror") if isinstance(err.get("innererror"), dict) else {}
    return classify(
        provider,
        status,
        reason=code or etype,
        message=message,
        headers=headers,
        context_length=code in _CONTEXT_CODES or "maximum context length" in lowered,
        policy=code in _POLICY_CODES
        or etype in _POLICY_CODES
        or inner.get("code") == "ResponsibleAIPolicyViolation",
    )


def _stream_status(err: dict, code: str | None, etype: str | None) -> int:
    numeric = err.get("code")
    if isinstance(numeric, int) and 100 <= numeric <= 599:  # vLLM puts the status in code
        return numeric
    if code == "rate_limit_exceeded" or etype in ("rate_limit_error", "tokens", "requests"):
        return 429
    if etype in ("invalid_request_error", "BadRequestError") or code in _CONTEXT_CODES | _POLICY_CODES:
        return 400
    return 500


ErrorOf = Callable[[dict, "int | None", Mapping[str, str]], UpstreamError]


class OpenAIStreamTranslator:
    """One upstream chat stream: chunks pass through minus stamped keys; usage is recorded. ``error_of``
    classifies an in-stream error object (a compatible provider's own reading of it: Azure's)."""

    def __init__(self, error_of: ErrorOf = error_from) -> None:
        self.error_of = error_of
        self.usage: TokenUsage | None = None
        self.finish_reason: str | None = None
        self.done = False
        self._state = StreamState()
        self._tier: object = None

    def feed(self, event: SSEEvent) -> list[dict]:
        data = event.data.strip()
        if not data:
            return []
        if data == "[DONE]":
            self.done = True
            return []
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise UpstreamUnavailable(
                f"Upstream ({PROVIDER}) sent a stream event that is not JSON.", upstream_status=200
            ) from None
        if not isinstance(obj, dict):
            raise UpstreamUnavailable(f"Upstream ({PROVIDER}) sent an unexpected stream event.", upstream_status=200)
        if "error" in obj or obj.get("object") == "error":
            raise self.error_of(obj, None, {})
        if obj.get("service_tier") is not None:
            self._tier = obj["service_tier"]  # every chunk names the tier that served it
        if obj.get("usage") is not None:
            self.usage = with_tier(openai_usage(obj["usage"]), self._tier)
        choices = obj.get("choices")
        if not choices:
            return []  # the usage-only chunk (or a keep-alive-ish empty chunk)
        for choice in choices:
            self._observe(choice)
        return [{k: v for k, v in obj.items() if k not in _CHUNK_DROP}]

    def _observe(self, choice: dict) -> None:
        if choice.get("finish_reason") and choice.get("index", 0) == 0:
            self.finish_reason = choice["finish_reason"]
        delta = choice.get("delta") or {}
        for key in ("content", "reasoning_content", "refusal"):
            if isinstance(delta.get(key), str):
                self._state.emitted(delta[key])
        for call in delta.get("tool_calls") or ():
            args = (call.get("function") or {}).get("arguments")
            if isinstance(args, str):
                self._state.emitted(args)

    def text_so_far(self) -> str:
        return self._state.joined()


class OpenAIChatDialect:
    name = "openai"

    @staticmethod
    def error(payload: dict, status: int | None, headers: Mapping[str, str]) -> UpstreamError:
        """Classify an error object of this provider (compatible providers override it)."""
        return error_from(payload, status, headers)

    def validate(self, body: dict, deployment: Deployment) -> None:
        reject_unknown(body, KNOWN_PARAMS, deployment, "Chat Completions")
        require_capabilities(body, deployment)

    def chat_request(
        self,
        body: dict,
        deployment: Deployment,
        secret: str | None,
        *,
        max_output_tokens: int,
        extra_headers: Mapping[str, str] | None = None,
    ) -> UpstreamRequest:
        out = dict(body)
        out["model"] = deployment.model
        out.pop("max_tokens", None)
        out["max_completion_tokens"] = max_output_tokens
        stream = bool(out.get("stream"))
        if stream:
            out["stream_options"] = {**(out.get("stream_options") or {}), "include_usage": True}
        else:
            out.pop("stream_options", None)  # OpenAI rejects it without stream
        return UpstreamRequest(
            url=_url(deployment.base_url, "/chat/completions"),
            headers=headers(secret, extra_headers, stream=stream),
            body=orjson.dumps(out),
        )

    def parse_chat(self, data: dict) -> ChatResult:
        error = _answer_error(data, self.error)
        if error is not None:
            raise error
        body = {k: v for k, v in data.items() if k not in _STAMPED}
        usage = data.get("usage")
        choices = body.get("choices")
        if not isinstance(choices, list) or not choices:
            raise UpstreamUnavailable(f"Upstream ({PROVIDER}) sent an answer without choices.", upstream_status=200)
        finish = choices[0].get("finish_reason") if choices and isinstance(choices[0], dict) else None
        return ChatResult(body=body, usage=with_tier(openai_usage(usage), data.get("service_tier")),
                          finish_reason=finish)

    def stream_translator(self) -> OpenAIStreamTranslator:
        return OpenAIStreamTranslator(self.error)

    def stream_parser(self) -> SSEParser:
        return SSEParser()

    def parse_error(self, status: int, body: bytes, headers: Mapping[str, str]) -> UpstreamError:
        return self.error(load_json(body), status, headers)

    def embeddings_request(
        self,
        body: dict,
        deployment: Deployment,
        secret: str | None,
        *,
        extra_headers: Mapping[str, str] | None = None,
    ) -> UpstreamRequest:
        out = {**body, "model": deployment.model}
        return UpstreamRequest(
            url=_url(deployment.base_url, "/embeddings"),
            headers=headers(secret, extra_headers, stream=False),
            body=orjson.dumps(out),
        )

    def parse_embeddings(self, data: dict) -> ChatResult:
        error = _answer_error(data, self.error)
        if error is not None:
            raise error
        if not isinstance(data.get("data"), list):
            raise UpstreamUnavailable(f"Upstream ({PROVIDER}) sent embeddings without data.", upstream_status=200)
        body = {k: v for k, v in data.items() if k != "model"}
        return ChatResult(body=body, usage=openai_embedding_usage(data.get("usage")))
