"""The Google Gemini dialect (Gemini API and Vertex AI): request parsing and response bytes (no I/O).

``POST …/models/{model}:generateContent`` answers a ``GenerateContentResponse`` (``candidates``,
``usageMetadata``, ``modelVersion``, ``responseId``); ``:streamGenerateContent?alt=sse`` answers SSE
``data:`` events, each a partial response, the last with ``finishReason`` and the final ``usageMetadata``.
Function calls come whole in one part. Errors are ``{"error": {"code", "message", "status"}}`` (google.rpc);
429 is ``RESOURCE_EXHAUSTED`` with a ``RetryInfo`` detail. The Gemini API authenticates ``x-goog-api-key``
(or ``?key=``) against accounts' ``api_key``; Vertex AI ``Authorization: Bearer`` tokens ``google_token``
issued. ``promptTokenCount`` includes ``cachedContentTokenCount``; thoughts are ``thoughtsTokenCount``.
Vertex's ``X-Vertex-AI-LLM-Shared-Request-Type`` (priority, flex) asks for a tier; ``usageMetadata.trafficType``
names the one served.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from aiohttp import web

from infra.simulator.billing import BillableUsage
from infra.simulator.faults import policy_message
from infra.simulator.generation import ChatRequest, Plan, RequestError, Tool
from infra.simulator.state import SimState

NAME = "gemini"
REPORTS_CACHE_WRITE = False
PARAMS = frozenset("""contents systemInstruction tools toolConfig generationConfig safetySettings cachedContent
    labels""".split())  # noqa: SIM905
TIER_HEADER = "X-Vertex-AI-LLM-Shared-Request-Type"
TIER_TRAFFIC = {"priority": "ON_DEMAND_PRIORITY", "flex": "ON_DEMAND_FLEX", "provisioned": "PROVISIONED_THROUGHPUT"}
FINISH = {"stop": "STOP", "length": "MAX_TOKENS", "tool": "STOP", "stop_sequence": "STOP"}
_STATUS = {"invalid_request": "INVALID_ARGUMENT", "authentication": "UNAUTHENTICATED", "not_found": "NOT_FOUND",
           "rate_limit": "RESOURCE_EXHAUSTED", "server_error": "INTERNAL", "unavailable": "UNAVAILABLE",
           "overloaded": "UNAVAILABLE", "content_policy": "INVALID_ARGUMENT", "context_length": "INVALID_ARGUMENT"}


def stream_from_path(path: str) -> bool:
    return path.endswith(":streamGenerateContent")


def authenticate(state: SimState, request: web.Request, raw: bytes) -> str:
    auth = request.headers.get("Authorization", "")
    if auth[:7].lower() == "bearer ":
        account = state.google_tokens.get(auth[7:].strip())
        if account is None:
            raise RequestError(401, "authentication", "Request had invalid authentication credentials. Expected "
                                                      "OAuth 2 access token, login cookie or other valid "
                                                      "authentication credential.")
        return account
    key = request.headers.get("x-goog-api-key") or request.query.get("key")
    account = state.account_for(key)
    if account is None:
        raise RequestError(400 if key else 403, "authentication",
                           "API key not valid. Please pass a valid API key." if key else
                           "Method doesn't allow unregistered callers (callers without established identity).")
    return account


def check_headers(headers: Mapping[str, str]) -> None:
    return None


def error_body(err: RequestError) -> bytes:
    error: dict[str, Any] = {"code": err.status, "message": err.message, "status": _STATUS.get(err.kind, "INTERNAL")}
    retry = err.headers.get("retry-after")
    if err.kind == "rate_limit" and retry is not None:
        error["details"] = [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{retry}s"}]
    return orjson.dumps({"error": error})


def fault_error(kind: str, model: str, retry_after: float) -> RequestError:
    if kind == "429":
        return RequestError(429, "rate_limit", "Resource has been exhausted (e.g. check quota).",
                            headers={"retry-after": f"{retry_after:g}"})
    if kind == "500":
        return RequestError(500, "server_error", "An internal error has occurred.")
    if kind in ("503", "529"):
        return RequestError(503, "unavailable", "The model is overloaded. Please try again later.")
    if kind == "content_policy":
        return RequestError(400, "content_policy", f"Request blocked for safety reasons: {policy_message()}")
    raise ValueError(kind)


def context_error(input_tokens: int, max_tokens: int | None, window: int) -> RequestError:
    return RequestError(400, "context_length", f"The input token count ({input_tokens}) exceeds the maximum "
                                               f"number of tokens allowed ({window}).")


def _bad(message: str) -> RequestError:
    return RequestError(400, "invalid_request", message)


def _parts(parts: Any, path: str, texts: list[str]) -> tuple[int, int]:
    if not isinstance(parts, list) or not parts:
        raise _bad(f"* GenerateContentRequest.{path}: contents.parts must not be empty.")
    images = results = 0
    for part in parts:
        if not isinstance(part, dict):
            raise _bad(f"Invalid JSON payload received. {path}: a part must be an object.")
        if isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif isinstance(part.get("inlineData"), dict):
            images += 1
        elif isinstance(part.get("functionCall"), dict):
            call = part["functionCall"]
            texts.append(f"{call.get('name', '')} {orjson.dumps(call.get('args', {})).decode()}")
        elif isinstance(part.get("functionResponse"), dict):
            results += 1
            texts.append(orjson.dumps(part["functionResponse"].get("response", {})).decode())
        else:
            raise _bad(f"Invalid JSON payload received. Unknown name in {path}: {sorted(part)}")
    return images, results


def parse_chat(body: dict, strict: bool, model: str = "") -> ChatRequest:
    if strict:
        for key in body:
            if key not in PARAMS:
                raise _bad(f'Invalid JSON payload received. Unknown name "{key}": Cannot find field.')
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise _bad("* GenerateContentRequest.contents: contents is not specified")
    texts: list[str] = []
    framed = len(contents)
    system = body.get("systemInstruction")
    if system is not None:
        framed += 1
        _parts((system or {}).get("parts"), "system_instruction", texts)
    images = results = 0
    for i, content in enumerate(contents):
        if not isinstance(content, dict) or content.get("role", "user") not in ("user", "model"):
            raise _bad(f"* GenerateContentRequest.contents[{i}].role: Please use a valid role: user, model.")
        more, res = _parts(content.get("parts"), f"contents[{i}].parts", texts)
        images, results = images + more, results + res
    config = body.get("generationConfig") or {}
    max_tokens = config.get("maxOutputTokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1):
        raise _bad("* GenerateContentRequest.generation_config.max_output_tokens: must be positive")
    schema = config.get("responseJsonSchema") or config.get("responseSchema")
    json_mode = config.get("responseMimeType") == "application/json"
    tools, forced = _tools(body.get("tools"), body.get("toolConfig"), texts)
    last = contents[-1].get("parts") or []
    return ChatRequest(model=model, stream=False, texts=texts, framed=framed, images=images, max_tokens=max_tokens,
                       stop=list(config.get("stopSequences") or ()), tools=tools, forced_tool=forced,
                       tool_results=results, json_schema=schema if json_mode and isinstance(schema, dict) else None,
                       json_object=json_mode and not isinstance(schema, dict),
                       last_is_tool_result=any(isinstance(p, dict) and "functionResponse" in p for p in last))


def _tools(raw: Any, config: Any, texts: list[str]) -> tuple[list[Tool], str | None]:
    tools = []
    for group in raw or ():
        for decl in (group or {}).get("functionDeclarations") or ():
            schema = decl.get("parametersJsonSchema") or decl.get("parameters") or {"type": "object"}
            if not isinstance(decl.get("name"), str):
                raise _bad("* GenerateContentRequest.tools[0].function_declarations[0].name: Name cannot be empty.")
            texts.append(f"{decl['name']} {decl.get('description', '')} "
                         f"{orjson.dumps(schema, option=orjson.OPT_SORT_KEYS).decode()}")
            tools.append(Tool(decl["name"], schema))
    calling = ((config or {}).get("functionCallingConfig") or {})
    if calling.get("mode") == "ANY" and tools:
        allowed = calling.get("allowedFunctionNames") or [tools[0].name]
        return tools, allowed[0]
    return tools, None


def requested_tier(headers: Mapping[str, str]) -> str | None:
    """Vertex AI's shared-request-type header: priority or flex (None: standard pay-as-you-go)."""
    raw = headers.get(TIER_HEADER)
    if raw is None:
        return None
    if raw.lower() not in TIER_TRAFFIC:
        raise _bad(f"Invalid value for {TIER_HEADER}: {raw!r}; expected priority or flex.")
    return raw.lower()


def usage(plan: Plan, sent: int | None = None) -> dict:
    out = plan.output_tokens if sent is None else sent
    meta = {"promptTokenCount": plan.input_tokens, "candidatesTokenCount": out,
            "totalTokenCount": plan.input_tokens + out + plan.reasoning_tokens,
            "trafficType": TIER_TRAFFIC.get(plan.service_tier or "", "ON_DEMAND")}
    if plan.cached_tokens:
        meta["cachedContentTokenCount"] = plan.cached_tokens
    if plan.reasoning_tokens:
        meta["thoughtsTokenCount"] = plan.reasoning_tokens
    return meta


def billable(plan: Plan, sent: int) -> BillableUsage:
    return BillableUsage(input=plan.input_tokens - plan.cached_tokens, cached_input=plan.cached_tokens,
                         output=sent, reasoning=plan.reasoning_tokens)


def _part(plan: Plan) -> dict:
    if plan.kind == "tool":
        try:
            args = orjson.loads(plan.content)
        except orjson.JSONDecodeError:
            args = {}
        return {"functionCall": {"name": plan.tool_name, "args": args}}
    return {"text": plan.content}


def _response(parts: list[dict], rid: str, model: str, finish: str | None = None, meta: dict | None = None) -> dict:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    out: dict[str, Any] = {"candidates": [candidate]}
    if meta is not None:
        out["usageMetadata"] = meta
    out.update(modelVersion=model, responseId=rid)
    return out


def completion(plan: Plan, rid: str, created: int, model: str) -> bytes:
    return orjson.dumps(_response([_part(plan)], rid, model, FINISH[plan.finish], usage(plan)))


class StreamEncoder:
    """SSE bytes of one streamGenerateContent: a chunk per token; a function call whole, in the last chunk."""

    def __init__(self, plan: Plan, rid: str, created: int, model: str, include_usage: bool = True) -> None:
        self.plan, self.rid, self.model = plan, rid, model

    def _event(self, data: dict) -> bytes:
        return b"data: " + orjson.dumps(data) + b"\r\n\r\n"

    def head(self) -> bytes:
        return b""

    def piece(self, text: str) -> bytes:
        if self.plan.kind == "tool":
            return b""
        return self._event(_response([{"text": text}], self.rid, self.model, meta=usage(self.plan, 0)))

    def tail(self, sent: int) -> bytes:
        parts = [_part(self.plan)] if self.plan.kind == "tool" else [{"text": ""}]
        return self._event(_response(parts, self.rid, self.model, FINISH[self.plan.finish], usage(self.plan, sent)))

    @staticmethod
    def error(err: RequestError) -> bytes:
        return b"data: " + error_body(err) + b"\r\n\r\n"
