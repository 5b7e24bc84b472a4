"""The AWS Bedrock Converse dialect (``dialect: bedrock_converse``).

``POST {base_url}/model/{model}/converse`` and ``…/converse-stream`` (the model id, an inference profile id or
an ARN, percent-encoded in the path; ``base_url`` is the regional runtime endpoint,
``https://bedrock-runtime.{region}.amazonaws.com``). Every request is signed with SigV4 by botocore
(``proxy.upstream.credentials.aws``) for the deployment's region; the stream is AWS event-stream framed.
This module holds which OpenAI parameters Bedrock can honour and wires request, response and framing
behind the ``Dialect`` port.
"""

from __future__ import annotations

from typing import Mapping
from urllib.parse import quote

import orjson

from proxy.errors import InvalidRequest, UnsupportedParameter, UpstreamAuth, UpstreamError
from proxy.snapshot import Deployment
from proxy.upstream.base import ChatResult, Credential, UpstreamRequest
from proxy.upstream.bedrock.eventstream import EventStreamParser
from proxy.upstream.bedrock.request import build_body
from proxy.upstream.bedrock.response import BedrockStreamTranslator, error_from, parse_converse
from proxy.upstream.capabilities import refuse_untranslatable, reject_unknown, require_capabilities
from proxy.upstream.classify import load_json

TRANSLATED = frozenset({
    "messages", "model", "max_tokens", "max_completion_tokens", "stream", "stream_options", "temperature",
    "top_p", "stop", "tools", "tool_choice", "response_format", "user", "safety_identifier", "service_tier",
})  # fmt: skip
NOOP_VALUES: dict[str, tuple] = {
    "n": (1,), "logprobs": (False,), "top_logprobs": (0,), "logit_bias": ({},), "presence_penalty": (0,),
    "frequency_penalty": (0,), "store": (False,), "metadata": ({},), "modalities": (["text"],),
    "parallel_tool_calls": (True,),
}  # fmt: skip
NEVER = frozenset({
    "seed", "audio", "prediction", "reasoning_effort", "verbosity", "web_search_options",
    "prompt_cache_key", "prompt_cache_retention", "functions", "function_call",
})  # fmt: skip
KNOWN_PARAMS = TRANSLATED | frozenset(NOOP_VALUES) | NEVER


def model_url(dep: Deployment, operation: str) -> str:
    return f"{dep.base_url.rstrip('/')}/model/{quote(dep.model, safe='')}/{operation}"


class BedrockConverseDialect:
    name = "bedrock_converse"

    def validate(self, body: dict, deployment: Deployment) -> None:
        reject_unknown(body, KNOWN_PARAMS, deployment, "Chat Completions")
        require_capabilities(body, deployment)
        refuse_untranslatable(body, deployment, NEVER, NOOP_VALUES, "Bedrock Converse")
        build_body(body, deployment, max_output_tokens=1)  # message-level checks: a dry run of the translation

    def chat_request(self, body: dict, deployment: Deployment, secret: Credential, *, max_output_tokens: int,
                     extra_headers: Mapping[str, str] | None = None) -> UpstreamRequest:
        stream = bool(body.get("stream"))
        url = model_url(deployment, "converse-stream" if stream else "converse")
        raw = orjson.dumps(build_body(body, deployment, max_output_tokens))
        headers = dict(extra_headers or {})
        headers["content-type"] = "application/json"
        headers["accept"] = "application/vnd.amazon.eventstream" if stream else "application/json"
        if secret is None or isinstance(secret, str):
            raise UpstreamAuth(f"Deployment {deployment.id} has no AWS credentials to sign with.",
                               code="provider_credentials_failed")
        headers.update(secret.sign("POST", url, headers, raw))
        return UpstreamRequest(url=url, headers=headers, body=raw)

    def parse_chat(self, data: dict) -> ChatResult:
        return parse_converse(data)

    def stream_translator(self) -> BedrockStreamTranslator:
        return BedrockStreamTranslator()

    def stream_parser(self) -> EventStreamParser:
        return EventStreamParser()

    def parse_error(self, status: int, body: bytes, headers: Mapping[str, str]) -> UpstreamError:
        return error_from(load_json(body), status, headers)

    def embeddings_request(self, body: dict, deployment: Deployment, secret: Credential, *,
                           extra_headers: Mapping[str, str] | None = None) -> UpstreamRequest:
        raise UnsupportedParameter("model", deployment.id, "Bedrock Converse has no embeddings")

    def parse_embeddings(self, data: dict) -> ChatResult:
        raise InvalidRequest("Bedrock Converse has no embeddings.", param="model")
