"""The Google Gemini dialect (``dialect: gemini``): the Gemini API and Vertex AI.

``POST {base_url}/models/{model}:generateContent`` and ``…:streamGenerateContent?alt=sse``. On the Gemini API
``base_url`` is ``https://generativelanguage.googleapis.com/v1beta`` and the key goes in ``x-goog-api-key``
(``auth: key``); on Vertex AI it is
``https://{location}-aiplatform.googleapis.com/v1/projects/{project}/locations/{location}/publishers/google``
and a google-auth token goes as ``Authorization: Bearer`` (``auth: google_oauth``); there ``service_tier``
``priority`` or ``flex`` is asked by Vertex's shared-request-type header. This module holds which
OpenAI parameters Gemini can honour and wires request and response translation behind the ``Dialect`` port.
"""

from __future__ import annotations

from typing import Mapping
from urllib.parse import quote

import orjson

from proxy.errors import InvalidRequest, UnsupportedParameter, UpstreamError
from proxy.snapshot import Deployment
from proxy.upstream.base import ChatResult, Credential, UpstreamRequest
from proxy.upstream.capabilities import refuse_untranslatable, reject_unknown, require_capabilities
from proxy.upstream.classify import load_json
from proxy.upstream.gemini.request import build_body
from proxy.upstream.gemini.response import GeminiSSEParser, GeminiStreamTranslator, error_from, parse_generate

TRANSLATED = frozenset({
    "messages", "model", "max_tokens", "max_completion_tokens", "stream", "stream_options", "temperature",
    "top_p", "stop", "tools", "tool_choice", "response_format", "user", "safety_identifier", "seed",
    "presence_penalty", "frequency_penalty", "service_tier",
})  # fmt: skip
NOOP_VALUES: dict[str, tuple] = {
    "n": (1,), "logprobs": (False,), "top_logprobs": (0,), "logit_bias": ({},), "store": (False,),
    "metadata": ({},), "modalities": (["text"],), "parallel_tool_calls": (True,),
}  # fmt: skip
NEVER = frozenset({
    "audio", "prediction", "reasoning_effort", "verbosity", "web_search_options", "prompt_cache_key",
    "prompt_cache_retention", "functions", "function_call",
})  # fmt: skip
KNOWN_PARAMS = TRANSLATED | frozenset(NOOP_VALUES) | NEVER
# Vertex AI's tiers besides standard pay-as-you-go, asked per request by a header (the Gemini API has none).
VERTEX_TIERS = ("priority", "flex")
TIER_HEADER = "x-vertex-ai-llm-shared-request-type"


def tier_header(raw: object, dep: Deployment) -> str | None:
    """The Vertex AI shared-request-type for the OpenAI ``service_tier`` asked (None: standard)."""
    if raw is None or raw in ("auto", "default"):
        return None
    if dep.auth == "google_oauth" and raw in VERTEX_TIERS:
        return raw
    where = "Vertex AI serves priority, flex or default" if dep.auth == "google_oauth" else \
        "the Gemini API serves one tier (auto or default)"
    raise UnsupportedParameter("service_tier", dep.id, f"{where}, not {raw!r}")


def model_url(dep: Deployment, stream: bool) -> str:
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    return f"{dep.base_url.rstrip('/')}/models/{quote(dep.model, safe='')}:{method}"


class GeminiDialect:
    name = "gemini"

    def validate(self, body: dict, deployment: Deployment) -> None:
        reject_unknown(body, KNOWN_PARAMS, deployment, "Chat Completions")
        require_capabilities(body, deployment)
        refuse_untranslatable(body, deployment, NEVER, NOOP_VALUES, "Gemini")
        tier_header(body.get("service_tier"), deployment)
        build_body(body, deployment, max_output_tokens=1)

    def chat_request(self, body: dict, deployment: Deployment, secret: Credential, *, max_output_tokens: int,
                     extra_headers: Mapping[str, str] | None = None) -> UpstreamRequest:
        stream = bool(body.get("stream"))
        headers = dict(extra_headers or {})
        headers["content-type"] = "application/json"
        headers["accept"] = "text/event-stream" if stream else "application/json"
        tier = tier_header(body.get("service_tier"), deployment)
        if tier is not None:
            headers[TIER_HEADER] = tier
        if isinstance(secret, str) and secret:
            if deployment.auth == "google_oauth":
                headers["authorization"] = f"Bearer {secret}"
            else:
                headers["x-goog-api-key"] = secret
        return UpstreamRequest(url=model_url(deployment, stream), headers=headers,
                               body=orjson.dumps(build_body(body, deployment, max_output_tokens)))

    def parse_chat(self, data: dict) -> ChatResult:
        return parse_generate(data)

    def stream_translator(self) -> GeminiStreamTranslator:
        return GeminiStreamTranslator()

    def stream_parser(self) -> GeminiSSEParser:
        return GeminiSSEParser()

    def parse_error(self, status: int, body: bytes, headers: Mapping[str, str]) -> UpstreamError:
        return error_from(load_json(body), status, headers)

    def embeddings_request(self, body: dict, deployment: Deployment, secret: Credential, *,
                           extra_headers: Mapping[str, str] | None = None) -> UpstreamRequest:
        raise UnsupportedParameter("model", deployment.id, "embeddings through the gemini dialect are not supported")

    def parse_embeddings(self, data: dict) -> ChatResult:
        raise InvalidRequest("Embeddings through the gemini dialect are not supported.", param="model")
