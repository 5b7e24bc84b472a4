"""The AWS Bedrock Converse dialect: request parsing and response bytes (no I/O).

``POST /model/{modelId}/converse`` answers ``{"output": {"message"}, "stopReason", "usage", "metrics"}``;
``/converse-stream`` answers ``application/vnd.amazon.eventstream`` messages (``aws_auth.frame``):
``messageStart``, ``contentBlockStart`` (tool use only), ``contentBlockDelta`` per token,
``contentBlockStop``, ``messageStop`` and ``metadata`` (usage, metrics, serviceTier); each payload carries Bedrock's ``p``
padding field. Errors are ``{"message"}`` with the exception's name in ``x-amzn-ErrorType``; mid-stream, an
``exception`` message. Requests are authenticated by SigV4 (``aws_auth.verify``) against accounts whose
``api_key`` is ``ACCESS_KEY_ID:SECRET``. ``inputTokens`` excludes cache reads and writes, as Bedrock reports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from aiohttp import web

from infra.simulator.aws_auth import SignatureError, event, exception, verify
from infra.simulator.billing import BillableUsage
from infra.simulator.faults import policy_message
from infra.simulator.generation import ChatRequest, Plan, RequestError, Tool, stable_id
from infra.simulator.state import SimState

NAME = "bedrock"
REPORTS_CACHE_WRITE = True
STREAM_CONTENT_TYPE = "application/vnd.amazon.eventstream"
PARAMS = frozenset("""messages system inferenceConfig toolConfig guardrailConfig additionalModelRequestFields
    promptVariables additionalModelResponseFieldPaths requestMetadata performanceConfig serviceTier""".split())  # noqa: SIM905
TIERS = ("priority", "default", "flex")
STOP = {"stop": "end_turn", "length": "max_tokens", "tool": "tool_use", "stop_sequence": "stop_sequence"}
_EXCEPTIONS = {
    "invalid_request": "ValidationException", "authentication": "UnrecognizedClientException",
    "not_found": "ResourceNotFoundException", "rate_limit": "ThrottlingException",
    "server_error": "InternalServerException", "unavailable": "ServiceUnavailableException",
    "overloaded": "ServiceUnavailableException", "content_policy": "ValidationException",
    "context_length": "ValidationException",
}
_PAD = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def stream_from_path(path: str) -> bool:
    return path.endswith("/converse-stream")


def authenticate(state: SimState, request: web.Request, raw: bytes) -> str:
    """The account whose ``api_key`` (``ACCESS_KEY_ID:SECRET``) signed the request; raises ``RequestError``."""
    secrets = {key.split(":", 1)[0]: key for key in state.api_keys() if ":" in key}
    url = f"{request.scheme}://{request.host}{request.raw_path}"
    try:
        key_id = verify(request.method, url, request.headers, raw,
                        lambda k: secrets[k].split(":", 2)[1] if k in secrets else None)
    except SignatureError as exc:
        raise RequestError(403, "authentication", str(exc), code=exc.kind) from None
    account = state.account_for(secrets[key_id])
    assert account is not None
    return account


def check_headers(headers: Mapping[str, str]) -> None:
    return None


def error_headers(err: RequestError) -> dict[str, str]:
    kind = err.code if err.kind == "authentication" and err.code else _EXCEPTIONS.get(err.kind, "InternalServerException")
    return {"x-amzn-ErrorType": f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"}


def error_body(err: RequestError) -> bytes:
    return orjson.dumps({"message": err.message})


def fault_error(kind: str, model: str, retry_after: float) -> RequestError:
    if kind == "429":
        return RequestError(429, "rate_limit", "Too many requests, please wait before trying again.",
                            headers={"retry-after": f"{retry_after:g}"})
    if kind == "500":
        return RequestError(500, "server_error", "The server encountered an internal error.")
    if kind in ("503", "529"):
        return RequestError(503, "unavailable", "Bedrock is unable to process your request.")
    if kind == "content_policy":
        return RequestError(400, "content_policy", policy_message())
    raise ValueError(kind)


def context_error(input_tokens: int, max_tokens: int | None, window: int) -> RequestError:
    return RequestError(400, "context_length",
                        f"Input is too long for requested model: {input_tokens} input tokens + "
                        f"{max_tokens or 0} max tokens > {window}.")


def _bad(message: str) -> RequestError:
    return RequestError(400, "invalid_request", message)


def _blocks(content: Any, path: str, texts: list[str]) -> tuple[int, int]:
    """Append a message's text; (images, tool results)."""
    if not isinstance(content, list):
        raise _bad(f"1 validation error detected: Value at '{path}' failed to satisfy constraint: "
                   "Member must not be null")
    images = results = 0
    for j, block in enumerate(content):
        if not isinstance(block, dict) or len([k for k in block if k != "cachePoint"]) > 1:
            raise _bad(f"{path}.{j}: a content block must have exactly one member")
        if isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif isinstance(block.get("image"), dict):
            image = block["image"]
            if image.get("format") not in ("png", "jpeg", "gif", "webp") or "bytes" not in (image.get("source") or {}):
                raise _bad(f"{path}.{j}.image: format and source.bytes are required")
            images += 1
        elif isinstance(block.get("toolUse"), dict):
            use = block["toolUse"]
            texts.append(f"{use.get('name', '')} {orjson.dumps(use.get('input', {})).decode()}")
        elif isinstance(block.get("toolResult"), dict):
            results += 1
            for inner in block["toolResult"].get("content") or ():
                if isinstance(inner, dict) and isinstance(inner.get("text"), str):
                    texts.append(inner["text"])
                elif isinstance(inner, dict) and "json" in inner:
                    texts.append(orjson.dumps(inner["json"]).decode())
        elif "cachePoint" not in block:
            raise _bad(f"{path}.{j}: unsupported content block {sorted(block)}")
    return images, results


def parse_chat(body: dict, strict: bool, model: str = "") -> ChatRequest:
    if strict:
        for key in body:
            if key not in PARAMS:
                raise _bad(f"Malformed input request: extraneous key [{key}] is not permitted")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("A conversation must start with a user message. Try again with a conversation that starts "
                   "with a user message.")
    texts: list[str] = []
    framed = len(messages)
    system = body.get("system")
    if system is not None:
        if not isinstance(system, list):
            raise _bad("system: must be a list of system content blocks")
        framed += 1
        texts.extend(b["text"] for b in system if isinstance(b, dict) and isinstance(b.get("text"), str))
    images = results = 0
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or msg.get("role") not in ("user", "assistant"):
            raise _bad(f"messages.{i}.role: Member must satisfy enum value set: [user, assistant]")
        if i and messages[i - 1].get("role") == msg["role"]:
            raise _bad("A conversation must alternate between user and assistant roles.")
        more, res = _blocks(msg.get("content"), f"messages.{i}.content", texts)
        images, results = images + more, results + res
    config = body.get("inferenceConfig") or {}
    max_tokens = config.get("maxTokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1):
        raise _bad("inferenceConfig.maxTokens: Member must have value greater than or equal to 1")
    stops = config.get("stopSequences") or []
    tools, forced = _tools(body.get("toolConfig"), texts, messages)
    return ChatRequest(model=model, stream=False, texts=texts, framed=framed, images=images, max_tokens=max_tokens,
                       stop=list(stops), tools=tools, forced_tool=forced, tool_results=results,
                       service_tier=_tier(body.get("serviceTier")),
                       last_is_tool_result=results > 0 and any(
                           isinstance(b, dict) and "toolResult" in b for b in messages[-1].get("content") or ()))


def _tier(raw: Any) -> str | None:
    """``serviceTier.type`` asked: priority or flex (None: the default tier)."""
    if raw is None:
        return None
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind not in TIERS:
        raise _bad("serviceTier.type: Member must satisfy enum value set: [priority, default, flex]")
    return None if kind == "default" else kind


def _tools(raw: Any, texts: list[str], messages: list) -> tuple[list[Tool], str | None]:
    if raw is None:
        if any(isinstance(b, dict) and ("toolUse" in b or "toolResult" in b)
               for m in messages for b in (m.get("content") or ())):
            raise _bad("The toolConfig field must be defined when using toolUse and toolResult content blocks.")
        return [], None
    tools = []
    for i, t in enumerate(raw.get("tools") or ()):
        spec = t.get("toolSpec") if isinstance(t, dict) else None
        schema = ((spec or {}).get("inputSchema") or {}).get("json")
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or not isinstance(schema, dict):
            raise _bad(f"toolConfig.tools.{i}.toolSpec: name and inputSchema.json are required")
        texts.append(f"{spec['name']} {spec.get('description', '')} "
                     f"{orjson.dumps(schema, option=orjson.OPT_SORT_KEYS).decode()}")
        tools.append(Tool(spec["name"], schema))
    choice = raw.get("toolChoice") or {"auto": {}}
    if "any" in choice:
        return tools, tools[0].name if tools else None
    if "tool" in choice:
        name = (choice.get("tool") or {}).get("name")
        if not any(t.name == name for t in tools):
            raise _bad(f"toolConfig.toolChoice.tool.name: {name!r} is not one of the tools")
        return tools, name
    return tools, None


def usage(plan: Plan, sent: int | None = None) -> dict:
    out = plan.output_tokens if sent is None else sent
    return {"inputTokens": plan.uncached_input, "outputTokens": out + plan.reasoning_tokens,
            "totalTokens": plan.input_tokens + out + plan.reasoning_tokens,
            "cacheReadInputTokens": plan.cached_tokens, "cacheWriteInputTokens": plan.cache_write_tokens}


def billable(plan: Plan, sent: int) -> BillableUsage:
    return BillableUsage(input=plan.uncached_input, cached_input=plan.cached_tokens,
                         cache_write=plan.cache_write_tokens, output=sent + plan.reasoning_tokens)


def _tool_input(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return {}


def completion(plan: Plan, rid: str, created: int, model: str) -> bytes:
    if plan.kind == "tool":
        block = {"toolUse": {"toolUseId": stable_id("tooluse_", plan.tool_id_seed), "name": plan.tool_name,
                             "input": _tool_input(plan.content)}}
    else:
        block = {"text": plan.content}
    return orjson.dumps({"output": {"message": {"role": "assistant", "content": [block]}},
                         "stopReason": STOP[plan.finish], "usage": usage(plan), "metrics": {"latencyMs": 1},
                         "serviceTier": {"type": plan.service_tier or "default"}})


def _padded(data: dict) -> bytes:
    return orjson.dumps({**data, "p": _PAD[: 1 + len(data) % len(_PAD)]})


class StreamEncoder:
    """Event-stream bytes of one ConverseStream: ``head()``, ``piece(text)`` per token, ``tail(sent)``."""

    def __init__(self, plan: Plan, rid: str, created: int, model: str, include_usage: bool = True) -> None:
        self.plan = plan
        self.tool = plan.kind == "tool"

    def head(self) -> bytes:
        out = event("messageStart", _padded({"role": "assistant"}))
        if self.tool:
            start = {"toolUse": {"toolUseId": stable_id("tooluse_", self.plan.tool_id_seed), "name": self.plan.tool_name}}
            out += event("contentBlockStart", _padded({"contentBlockIndex": 0, "start": start}))
        return out

    def piece(self, text: str) -> bytes:
        delta = {"toolUse": {"input": text}} if self.tool else {"text": text}
        return event("contentBlockDelta", _padded({"contentBlockIndex": 0, "delta": delta}))

    def tail(self, sent: int) -> bytes:
        return (event("contentBlockStop", _padded({"contentBlockIndex": 0}))
                + event("messageStop", _padded({"stopReason": STOP[self.plan.finish]}))
                + event("metadata", _padded({"usage": usage(self.plan, sent), "metrics": {"latencyMs": 1},
                                             "serviceTier": {"type": self.plan.service_tier or "default"}})))

    @staticmethod
    def error(err: RequestError) -> bytes:
        kind = {"server_error": "internalServerException", "rate_limit": "throttlingException"}.get(
            err.kind, "modelStreamErrorException")
        return exception(kind, orjson.dumps({"message": err.message}))
