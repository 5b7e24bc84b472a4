"""The Azure OpenAI dialect: OpenAI's chat wire on Azure's URLs, auth and content filters (no I/O).

``POST /openai/deployments/{deployment}/chat/completions?api-version=…`` (the model is the deployment's name)
and ``POST /openai/v1/chat/completions`` (the model in the body). Authenticates ``api-key`` or an Entra
``Authorization: Bearer`` token, both checked against accounts' ``api_key``. Answers carry Azure's
``prompt_filter_results`` and per-choice ``content_filter_results``; a stream starts with a chunk holding only
``prompt_filter_results`` (``choices: []``). A filtered prompt is a 400 ``content_filter`` error whose
``innererror`` is ``ResponsibleAIPolicyViolation`` with the categories' results.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from infra.simulator import openai_wire
from infra.simulator.generation import ChatRequest, Plan, RequestError
from infra.simulator.state import SimState

NAME = "azure_openai"
REPORTS_CACHE_WRITE = False
API_VERSIONS = frozenset({"2024-10-21", "2025-04-01-preview", "2024-06-01"})
_SAFE = {name: {"filtered": False, "severity": "safe"} for name in ("hate", "self_harm", "sexual", "violence")}
_PROMPT_FILTER = [{"prompt_index": 0, "content_filter_results": _SAFE}]
POLICY = ("The response was filtered due to the prompt triggering Azure OpenAI's content management policy. "
          "Please modify your prompt and retry.")

check_headers = openai_wire.check_headers
context_error = openai_wire.context_error
billable = openai_wire.billable


def authenticate(state: SimState, request: web.Request, raw: bytes) -> str:
    if request.match_info.get("deployment") is not None and request.query.get("api-version") not in API_VERSIONS:
        raise RequestError(404, "not_found", "Resource not found" if "api-version" in request.query
                           else "Missing API version. Supported versions: " + ", ".join(sorted(API_VERSIONS)))
    key = request.headers.get("api-key") or openai_wire.api_key(request.headers)
    account = state.account_for(key)
    if account is None:
        raise RequestError(401, "authentication", "Access denied due to invalid subscription key or wrong API "
                                                  "endpoint. Make sure to provide a valid key for an active "
                                                  "subscription and use a correct regional API endpoint for your "
                                                  "resource.", code="401")
    return account


def parse_chat(body: dict, strict: bool, model: str = "") -> ChatRequest:
    return openai_wire.parse_chat({**body, "model": model or body.get("model")}, strict)


def error_body(err: RequestError) -> bytes:
    if err.kind != "content_policy":
        return openai_wire.error_body(err)
    result = {**_SAFE, "violence": {"filtered": True, "severity": "high"}}
    return orjson.dumps({"error": {"message": POLICY, "type": None, "param": "prompt", "code": "content_filter",
                                   "status": 400, "innererror": {"code": "ResponsibleAIPolicyViolation",
                                                                 "content_filter_result": result}}})


def fault_error(kind: str, model: str, retry_after: float) -> RequestError:
    if kind == "content_policy":
        return RequestError(400, "content_policy", POLICY, param="prompt")
    err = openai_wire.fault_error(kind, model, retry_after)
    if kind == "429":
        err.headers["x-ratelimit-remaining-requests"] = "0"
    return err


def completion(plan: Plan, rid: str, created: int, model: str) -> bytes:
    body: dict[str, Any] = orjson.loads(openai_wire.completion(plan, rid, created, model))
    body["prompt_filter_results"] = _PROMPT_FILTER
    for choice in body["choices"]:
        choice["content_filter_results"] = _SAFE
    return orjson.dumps(body)


class StreamEncoder(openai_wire.StreamEncoder):
    """OpenAI's stream, led by Azure's prompt-filter chunk."""

    def head(self) -> bytes:
        lead = {"choices": [], "created": 0, "id": "", "model": "", "object": "", "prompt_filter_results": _PROMPT_FILTER}
        return b"data: " + orjson.dumps(lead) + b"\n\n" + super().head()

    @staticmethod
    def error(err: RequestError) -> bytes:
        return b"data: " + error_body(err) + b"\n\n"
