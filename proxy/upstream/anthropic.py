"""The Anthropic Messages dialect.

Request translation lives in ``anthropic_request``, response and stream
translation in ``anthropic_response``; this module holds the policy of which
OpenAI parameters an Anthropic deployment can honour, and wires the three
together behind the ``Dialect`` port.
"""

from __future__ import annotations

from typing import Mapping

import orjson

from proxy.errors import InvalidRequest, UnsupportedParameter, UpstreamError
from proxy.snapshot import Deployment
from proxy.upstream.anthropic_request import build_body
from proxy.upstream.anthropic_response import AnthropicStreamTranslator, error_from, parse_message
from proxy.upstream.base import ChatResult, UpstreamRequest
from proxy.upstream.capabilities import refuse_untranslatable, reject_unknown, require_capabilities
from proxy.upstream.classify import load_json
from proxy.upstream.sse import SSEParser

API_VERSION = "2023-06-01"

# Parameters translated into the Messages request (or consumed by the gateway:
# max_tokens / max_completion_tokens become the relay's output cap).
TRANSLATED = frozenset({
    "messages", "model", "max_tokens", "max_completion_tokens", "stream", "stream_options",
    "temperature", "top_p", "stop", "tools", "tool_choice", "parallel_tool_calls",
    "response_format", "user", "safety_identifier",
})  # fmt: skip

# Parameters Anthropic has no counterpart for: accepted only at their no-op values.
NOOP_VALUES: dict[str, tuple] = {
    "n": (1,),
    "logprobs": (False,),
    "top_logprobs": (0,),
    "logit_bias": ({},),
    "presence_penalty": (0,),
    "frequency_penalty": (0,),
    "store": (False,),
    "metadata": ({},),
    "modalities": (["text"],),
    "service_tier": ("auto", "default"),
}

# Parameters Anthropic cannot honour at any value other than null.
NEVER = frozenset({
    "seed", "audio", "prediction", "reasoning_effort", "verbosity", "web_search_options",
    "prompt_cache_key", "prompt_cache_retention", "functions", "function_call",
})  # fmt: skip

KNOWN_PARAMS = TRANSLATED | frozenset(NOOP_VALUES) | NEVER


def headers(secret: str | None, extra: Mapping[str, str] | None, *, stream: bool,
            beta: str | None = None) -> dict[str, str]:
    """A Messages API request's headers; ours win over ``extra`` (the key is never overridable)."""
    out = dict(extra or {})
    out["content-type"] = "application/json"
    out["anthropic-version"] = API_VERSION
    if beta:
        out["anthropic-beta"] = beta
    out["accept"] = "text/event-stream" if stream else "application/json"
    if secret:
        out["x-api-key"] = secret
    return out


class AnthropicDialect:
    name = "anthropic"

    def validate(self, body: dict, deployment: Deployment) -> None:
        reject_unknown(body, KNOWN_PARAMS, deployment, "Chat Completions")
        require_capabilities(body, deployment)
        refuse_untranslatable(body, deployment, NEVER, NOOP_VALUES, "Anthropic")
        temperature = body.get("temperature")
        if isinstance(temperature, (int, float)) and temperature > 1:
            raise UnsupportedParameter("temperature", deployment.id, "Anthropic accepts 0 to 1")
        # Message-level checks (roles, parts, tool calls) are the translation itself:
        # a dry run raises exactly what chat_request would.
        build_body(body, deployment, max_output_tokens=1)

    def chat_request(
        self,
        body: dict,
        deployment: Deployment,
        secret: str | None,
        *,
        max_output_tokens: int,
        extra_headers: Mapping[str, str] | None = None,
    ) -> UpstreamRequest:
        return UpstreamRequest(
            url=deployment.base_url.rstrip("/") + "/v1/messages",
            headers=headers(secret, extra_headers, stream=bool(body.get("stream"))),
            body=orjson.dumps(build_body(body, deployment, max_output_tokens)),
        )

    def parse_chat(self, data: dict) -> ChatResult:
        return parse_message(data)

    def stream_translator(self) -> AnthropicStreamTranslator:
        return AnthropicStreamTranslator()

    def stream_parser(self) -> SSEParser:
        return SSEParser()

    def parse_error(self, status: int, body: bytes, headers: Mapping[str, str]) -> UpstreamError:
        return error_from(load_json(body), status, headers)

    def embeddings_request(
        self,
        body: dict,
        deployment: Deployment,
        secret: str | None,
        *,
        extra_headers: Mapping[str, str] | None = None,
    ) -> UpstreamRequest:
        raise UnsupportedParameter("model", deployment.id, "the Anthropic Messages API has no embeddings")

    def parse_embeddings(self, data: dict) -> ChatResult:
        raise InvalidRequest("The Anthropic Messages API has no embeddings.", param="model")
