"""The OpenAI chat/embeddings dialect: request parsing and response bytes (no I/O).

Non-stream answers are ``chat.completion`` objects; streams are
``data: {chat.completion.chunk}\\n\\n`` events ending in ``data: [DONE]``.
Errors are ``{"error": {"message", "type", "param", "code"}}``. Token deltas
are rendered from per-request byte templates (same key order as the dict
form) so a stream costs one ``orjson.dumps`` per token string, not per chunk.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from infra.simulator.billing import BillableUsage
from infra.simulator.faults import policy_message
from infra.simulator.generation import ChatRequest, Plan, RequestError, Tool, stable_id

NAME = "openai"
REPORTS_CACHE_WRITE = False
CHAT_PARAMS = frozenset("""model messages stream stream_options max_tokens max_completion_tokens n
    temperature top_p stop tools tool_choice parallel_tool_calls response_format seed user logprobs
    top_logprobs presence_penalty frequency_penalty logit_bias metadata store service_tier
    reasoning_effort modalities prediction audio web_search_options functions function_call
    prompt_cache_key safety_identifier verbosity""".split())  # noqa: SIM905
FINISH = {"stop": "stop", "stop_sequence": "stop", "length": "length", "tool": "tool_calls"}
_ERR_TYPES = {
    "invalid_request": "invalid_request_error", "authentication": "invalid_request_error",
    "not_found": "invalid_request_error", "rate_limit": "requests", "server_error": "server_error",
    "unavailable": "server_error", "overloaded": "server_error",
    "content_policy": "invalid_request_error", "context_length": "invalid_request_error",
}


def api_key(headers: Mapping[str, str]) -> str | None:
    auth = headers.get("Authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip() or None
    return None


def check_headers(headers: Mapping[str, str]) -> None:
    return None


def auth_error(missing: bool) -> RequestError:
    if missing:
        return RequestError(401, "authentication",
                            "You didn't provide an API key. You need to provide your API key in an "
                            "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
    return RequestError(401, "authentication", "Incorrect API key provided.", code="invalid_api_key")


def error_body(err: RequestError) -> bytes:
    code = err.code
    if code is None:
        code = {"rate_limit": "rate_limit_exceeded", "content_policy": "content_policy_violation",
                "context_length": "context_length_exceeded", "not_found": "model_not_found"}.get(err.kind)
    return orjson.dumps({"error": {"message": err.message, "type": _ERR_TYPES.get(err.kind, "server_error"),
                                   "param": err.param, "code": code}})


def fault_error(kind: str, model: str, retry_after: float) -> RequestError:
    if kind == "429":
        return RequestError(429, "rate_limit",
                            f"Rate limit reached for {model} on requests per min (RPM): Limit 500, Used 500, "
                            f"Requested 1. Please try again in {retry_after:g}s.",
                            headers={"Retry-After": f"{retry_after:g}"})
    if kind == "500":
        return RequestError(500, "server_error", "The server had an error while processing your request. "
                                                 "Sorry about that!")
    if kind in ("503", "529"):
        return RequestError(503, "unavailable", "The engine is currently overloaded, please try again later.")
    if kind == "content_policy":
        return RequestError(400, "content_policy", policy_message(), param="messages")
    raise ValueError(kind)


def context_error(input_tokens: int, max_tokens: int | None, window: int) -> RequestError:
    completion = max_tokens or 0
    total = max(input_tokens + completion, window + 1)
    return RequestError(400, "context_length",
                        f"This model's maximum context length is {window} tokens. However, you requested "
                        f"{total} tokens ({total - completion} in the messages, {completion} in the completion). "
                        "Please reduce the length of the messages or completion.", param="messages")


def _bad(message: str, param: str | None = None) -> RequestError:
    return RequestError(400, "invalid_request", message, param=param)


def _content_texts(content: Any, param: str, texts: list[str]) -> int:
    """Append the text of a message ``content``; return the number of images."""
    if content is None:
        return 0
    if isinstance(content, str):
        texts.append(content)
        return 0
    if not isinstance(content, list):
        raise _bad(f"Invalid type for '{param}': expected a string or an array of content parts.", param)
    images = 0
    for i, part in enumerate(content):
        ptype = part.get("type") if isinstance(part, dict) else None
        if ptype == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif ptype in ("image_url", "input_audio", "file"):
            images += 1
        elif ptype == "refusal":
            texts.append(str(part.get("refusal", "")))
        else:
            raise _bad(f"Invalid content part at '{param}[{i}]'.", f"{param}[{i}]")
    return images


def parse_chat(body: dict, strict: bool) -> ChatRequest:
    """Validate an OpenAI chat body into a :class:`ChatRequest` (raises RequestError)."""
    if strict:
        for key in body:
            if key not in CHAT_PARAMS:
                raise _bad(f"Unrecognized request argument supplied: {key}", key)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("you must provide a model parameter", "model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty array.", "messages")
    stream = body.get("stream") is True
    if body.get("stream_options") is not None and not stream:
        raise _bad("The 'stream_options' parameter is only allowed when 'stream' is enabled.", "stream_options")
    n = body.get("n", 1)
    if n not in (None, 1):
        raise _bad("The simulator supports only n=1.", "n")
    texts: list[str] = []
    images = 0
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or msg.get("role") not in ("system", "developer", "user", "assistant", "tool"):
            raise _bad(f"Invalid value for 'messages[{i}].role'.", f"messages[{i}].role")
        images += _content_texts(msg.get("content"), f"messages[{i}].content", texts)
        for call in msg.get("tool_calls") or []:
            fn = call.get("function", {}) if isinstance(call, dict) else {}
            texts.append(f"{fn.get('name', '')} {fn.get('arguments', '')}")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    param = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1):
        raise _bad(f"Invalid '{param}': expected an integer >= 1.", param)
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if len(stops) > 4 or not all(isinstance(s, str) for s in stops):
        raise _bad("'stop' must be a string or an array of at most 4 strings.", "stop")
    tools = _parse_tools(body.get("tools"), texts)
    forced = _forced_tool(body.get("tool_choice"), tools)
    rf = body.get("response_format")
    json_schema, json_object = None, False
    if isinstance(rf, dict) and rf.get("type") == "json_schema":
        schema = (rf.get("json_schema") or {}).get("schema")
        if not isinstance(schema, dict):
            raise _bad("Missing required parameter: 'response_format.json_schema.schema'.",
                       "response_format.json_schema.schema")
        json_schema = schema
    elif isinstance(rf, dict) and rf.get("type") == "json_object":
        json_object = True
        if "json" not in "\n".join(texts).lower():
            raise _bad("'messages' must contain the word 'json' in some form, to use 'response_format' "
                       "of type 'json_object'.", "messages")
    elif rf is not None and not (isinstance(rf, dict) and rf.get("type") == "text"):
        raise _bad("Invalid value for 'response_format.type'.", "response_format")
    tier = body.get("service_tier")
    if tier is not None and tier not in ("auto", "default", "flex", "scale", "priority"):
        raise _bad("Invalid value for 'service_tier': expected one of auto, default, flex, scale, priority.",
                   "service_tier")
    last = messages[-1]
    opts = body.get("stream_options") or {}
    return ChatRequest(model=model, stream=stream, texts=texts, framed=len(messages), images=images,
                       max_tokens=max_tokens, stop=stops, tools=tools, forced_tool=forced,
                       last_is_tool_result=last.get("role") == "tool", json_schema=json_schema,
                       tool_results=sum(isinstance(m, dict) and m.get("role") == "tool" for m in messages),
                       json_object=json_object, service_tier=tier if tier in ("flex", "scale", "priority") else None,
                       cache_key=body.get("prompt_cache_key") if isinstance(body.get("prompt_cache_key"), str) else None,
                       include_usage=stream and isinstance(opts, dict) and opts.get("include_usage") is True)


def _parse_tools(raw: Any, texts: list[str]) -> list[Tool]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise _bad("'tools' must be an array.", "tools")
    tools = []
    for i, t in enumerate(raw):
        fn = t.get("function") if isinstance(t, dict) and t.get("type") == "function" else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise _bad(f"Missing required parameter: 'tools[{i}].function.name'.", f"tools[{i}].function")
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        texts.append(f"{fn['name']} {fn.get('description', '')} {orjson.dumps(params, option=orjson.OPT_SORT_KEYS).decode()}")
        tools.append(Tool(fn["name"], params))
    return tools


def _forced_tool(choice: Any, tools: list[Tool]) -> str | None:
    if choice in (None, "auto", "none"):
        return None
    if not tools:
        raise _bad("'tool_choice' is only allowed when 'tools' are specified.", "tool_choice")
    if choice == "required":
        return tools[0].name
    if isinstance(choice, dict) and choice.get("type") == "function":
        name = (choice.get("function") or {}).get("name")
        if not any(t.name == name for t in tools):
            raise _bad(f"Tool choice names '{name}', which is not in 'tools'.", "tool_choice")
        return name
    raise _bad("Invalid value for 'tool_choice'.", "tool_choice")


def usage(plan: Plan, sent: int | None = None) -> dict:
    out = plan.output_tokens if sent is None else sent
    completion = out + plan.reasoning_tokens
    return {"prompt_tokens": plan.input_tokens, "completion_tokens": completion,
            "total_tokens": plan.input_tokens + completion,
            "prompt_tokens_details": {"cached_tokens": plan.cached_tokens},
            "completion_tokens_details": {"reasoning_tokens": plan.reasoning_tokens}}


def billable(plan: Plan, sent: int) -> BillableUsage:
    return BillableUsage(input=plan.input_tokens - plan.cached_tokens, cached_input=plan.cached_tokens,
                         output=sent, reasoning=plan.reasoning_tokens)


def _tool_call(plan: Plan) -> dict:
    return {"id": stable_id("call_", plan.tool_id_seed), "type": "function",
            "function": {"name": plan.tool_name, "arguments": plan.content}}


def completion(plan: Plan, rid: str, created: int, model: str) -> bytes:
    if plan.kind == "tool":
        message = {"role": "assistant", "content": None, "tool_calls": [_tool_call(plan)], "refusal": None}
    else:
        message = {"role": "assistant", "content": plan.content, "refusal": None}
    return orjson.dumps({
        "id": rid, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": FINISH[plan.finish], "logprobs": None}],
        "usage": usage(plan), "service_tier": plan.service_tier or "default", "system_fingerprint": "fp_sim",
    })


class StreamEncoder:
    """Bytes of one OpenAI stream: ``head()``, ``piece(text)`` per token, ``tail(sent)``."""

    def __init__(self, plan: Plan, rid: str, created: int, model: str, include_usage: bool) -> None:
        self.plan, self.include_usage = plan, include_usage
        self._base = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                      "service_tier": plan.service_tier or "default", "system_fingerprint": "fp_sim"}
        head = orjson.dumps(self._base)[:-1]
        tail = b',"logprobs":null,"finish_reason":null}]' + (b',"usage":null}\n\n' if include_usage else b"}\n\n")
        if plan.kind == "tool":
            self._pre = b"data: " + head + b',"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":'
            self._post = b"}}]}" + tail
        else:
            self._pre = b"data: " + head + b',"choices":[{"index":0,"delta":{"content":'
            self._post = b"}" + tail

    def _chunk(self, delta: dict, finish: str | None = None, **extra: Any) -> bytes:
        body = {**self._base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        if self.include_usage:
            body["usage"] = None
        body.update(extra)
        return b"data: " + orjson.dumps(body) + b"\n\n"

    def head(self) -> bytes:
        if self.plan.kind == "tool":
            call = _tool_call(self.plan)
            call["function"]["arguments"] = ""
            return self._chunk({"role": "assistant", "content": None, "tool_calls": [{"index": 0, **call}],
                                "refusal": None})
        return self._chunk({"role": "assistant", "content": "", "refusal": None})

    def piece(self, text: str) -> bytes:
        return self._pre + orjson.dumps(text) + self._post

    def tail(self, sent: int) -> bytes:
        out = self._chunk({}, FINISH[self.plan.finish])
        if self.include_usage:
            out += b"data: " + orjson.dumps({**self._base, "choices": [], "usage": usage(self.plan, sent)}) + b"\n\n"
        return out + b"data: [DONE]\n\n"

    @staticmethod
    def error(err: RequestError) -> bytes:
        return b"data: " + error_body(err) + b"\n\n"


# -- embeddings ---------------------------------------------------------------

def parse_embeddings(body: dict) -> tuple[str, list[str | list[int]], int | None, str]:
    """``(model, inputs, dimensions, encoding_format)`` from an embeddings body."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("you must provide a model parameter", "model")
    raw = body.get("input")
    if isinstance(raw, str):
        inputs: list = [raw]
    elif isinstance(raw, list) and raw and all(isinstance(x, int) and not isinstance(x, bool) for x in raw):
        inputs = [raw]
    elif isinstance(raw, list) and raw and all(
            isinstance(x, str) or (isinstance(x, list) and all(isinstance(t, int) for t in x)) for x in raw):
        inputs = raw
    else:
        raise _bad("'input' must be a string, an array of strings, or an array of token arrays.", "input")
    if any(len(x) == 0 for x in inputs):
        raise _bad("'input' cannot contain an empty string or token array.", "input")
    dims = body.get("dimensions")
    if dims is not None and (not isinstance(dims, int) or isinstance(dims, bool) or dims < 1):
        raise _bad("'dimensions' must be an integer >= 1.", "dimensions")
    fmt = body.get("encoding_format") or "float"
    if fmt not in ("float", "base64"):
        raise _bad("'encoding_format' must be 'float' or 'base64'.", "encoding_format")
    return model, inputs, dims, fmt


def embeddings_body(model: str, data: list[Any], tokens: int) -> bytes:
    return orjson.dumps({
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(data)],
        "model": model, "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    })
