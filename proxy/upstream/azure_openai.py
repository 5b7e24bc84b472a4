"""The Azure OpenAI dialect: OpenAI's Chat Completions on Azure's URLs, auth and content filters.

Two URL forms, chosen by the deployment:

* ``api_version`` set: the deployment-name form,
  ``{base_url}/openai/deployments/{model}/chat/completions?api-version={api_version}`` (``base_url`` is the
  resource endpoint, ``model`` the Azure deployment's name);
* otherwise the v1 form, ``{base_url}/chat/completions`` with ``base_url`` ending in ``/openai/v1``.

Auth is the ``api-key`` header (``auth: key``) or a Microsoft Entra bearer token (``auth: entra``). Azure's
content filters: a filtered prompt is a 400 ``content_filter`` error whose ``innererror`` carries the
categories; it becomes a ``content_policy_violation`` naming them, which is never retried elsewhere. A filtered
answer ends with ``finish_reason: "content_filter"``, as OpenAI's does. Azure's per-choice filter annotations
(``prompt_filter_results``, ``content_filter_results``) are dropped, so clients see OpenAI's shapes.
"""

from __future__ import annotations

from typing import Mapping
from urllib.parse import quote

import orjson

from proxy.errors import UpstreamError
from proxy.snapshot import Deployment
from proxy.upstream.base import ChatResult, Credential, SSEEvent, UpstreamRequest
from proxy.upstream.openai_chat import OpenAIChatDialect, OpenAIStreamTranslator, error_from, headers

PROVIDER = "azure_openai"
_ANNOTATIONS = ("prompt_filter_results", "prompt_annotations")
_CHOICE_ANNOTATIONS = ("content_filter_results", "content_filter_offsets")


def azure_url(dep: Deployment, operation: str) -> str:
    """The URL of ``operation`` (``chat/completions``, ``embeddings``) for this deployment's URL form."""
    base = dep.base_url.rstrip("/")
    if dep.api_version:
        return (f"{base}/openai/deployments/{quote(dep.model, safe='')}/{operation}"
                f"?api-version={quote(dep.api_version, safe='-.')}")
    return f"{base}/{operation}"


def azure_headers(dep: Deployment, secret: Credential, extra: Mapping[str, str] | None, *,
                  stream: bool) -> dict[str, str]:
    out = headers(None, extra, stream=stream)
    if isinstance(secret, str) and secret:
        if dep.auth == "entra":
            out["authorization"] = f"Bearer {secret}"
        else:
            out["api-key"] = secret
    return out


def _filter_categories(err: dict) -> str:
    """``hate (high), violence (medium)`` from an error's content-filter result, '' when none."""
    inner = err.get("innererror") if isinstance(err.get("innererror"), dict) else {}
    result = inner.get("content_filter_result")
    if not isinstance(result, dict):
        return ""
    hits = []
    for name, verdict in sorted(result.items()):
        if isinstance(verdict, dict) and verdict.get("filtered") is True:
            severity = verdict.get("severity")
            hits.append(f"{name} ({severity})" if isinstance(severity, str) else str(name))
    return ", ".join(hits)


def azure_error(payload: dict, status: int | None, hdrs: Mapping[str, str]) -> UpstreamError:
    err = payload.get("error") if isinstance(payload.get("error"), dict) else {}
    if err.get("code") == "content_filter" and isinstance(err.get("message"), str):
        categories = _filter_categories(err)
        if categories:
            err = {**err, "message": f"{err['message']} Filtered categories: {categories}."}
        payload = {**payload, "error": {**err, "code": "content_filter"}}
    return error_from(payload, status, hdrs, PROVIDER)


def _clean_choice(choice: object) -> object:
    if isinstance(choice, dict) and any(k in choice for k in _CHOICE_ANNOTATIONS):
        return {k: v for k, v in choice.items() if k not in _CHOICE_ANNOTATIONS}
    return choice


def clean(obj: dict) -> dict:
    """An Azure answer or chunk without its filter annotations."""
    if any(k in obj for k in _ANNOTATIONS):
        obj = {k: v for k, v in obj.items() if k not in _ANNOTATIONS}
    choices = obj.get("choices")
    if isinstance(choices, list):
        obj = {**obj, "choices": [_clean_choice(c) for c in choices]}
    return obj


class AzureStreamTranslator(OpenAIStreamTranslator):
    """OpenAI's translator with Azure's error classification; chunks lose Azure's annotations."""

    def __init__(self) -> None:
        super().__init__(azure_error)

    def feed(self, event: SSEEvent) -> list[dict]:
        return [clean(chunk) for chunk in super().feed(event)]


class AzureOpenAIDialect(OpenAIChatDialect):
    name = "azure_openai"
    error = staticmethod(azure_error)

    def chat_request(self, body: dict, deployment: Deployment, secret: Credential, *, max_output_tokens: int,
                     extra_headers: Mapping[str, str] | None = None) -> UpstreamRequest:
        req = super().chat_request(body, deployment, None, max_output_tokens=max_output_tokens,
                                   extra_headers=extra_headers)
        return UpstreamRequest(url=azure_url(deployment, "chat/completions"),
                               headers=azure_headers(deployment, secret, extra_headers, stream=bool(body.get("stream"))),
                               body=req.body)

    def parse_chat(self, data: dict) -> ChatResult:
        return super().parse_chat(clean(data))

    def stream_translator(self) -> AzureStreamTranslator:
        return AzureStreamTranslator()

    def embeddings_request(self, body: dict, deployment: Deployment, secret: Credential, *,
                           extra_headers: Mapping[str, str] | None = None) -> UpstreamRequest:
        return UpstreamRequest(url=azure_url(deployment, "embeddings"),
                               headers=azure_headers(deployment, secret, extra_headers, stream=False),
                               body=orjson.dumps({**body, "model": deployment.model}))
