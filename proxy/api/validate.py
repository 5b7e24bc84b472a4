"""Validating OpenAI-shaped request bodies before anything is admitted.

Checks shapes and types the OpenAI API itself checks, naming the parameter
at fault. Whether a *deployment* can honour a well-formed parameter is the
dialect's question (``Dialect.validate``), asked after routing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.errors import InvalidRequest

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
PART_TYPES = frozenset({"text", "image_url", "input_audio", "file", "refusal"})
RESPONSE_FORMATS = frozenset({"text", "json_object", "json_schema"})
MAX_CHOICES = 128  # ``n``: the most choices OpenAI generates for one request
MAX_DIMENSIONS = 16384  # ``dimensions``: above every embedding model's output size


@dataclass(frozen=True, slots=True)
class ChatCall:
    alias: str
    body: dict[str, Any]
    stream: bool
    include_usage: bool
    requested_max_output: int | None
    max_output_param: str | None = None  # what the client's API calls the output cap (None: chat's own names)
    native_only: tuple[tuple[str, str], ...] = ()  # (param, what) only a passed-through request carries


@dataclass(frozen=True, slots=True)
class EmbeddingsCall:
    alias: str
    body: dict[str, Any]
    texts: tuple[str, ...]  # for estimating input tokens


def _one_of(value: Any, allowed: frozenset[str]) -> bool:
    """``value in allowed`` for any JSON value (a list or an object is unhashable: never a member)."""
    return isinstance(value, str) and value in allowed


def _bad(param: str, message: str) -> InvalidRequest:
    return InvalidRequest(message, param=param, code="invalid_value")


def _int(body: dict, name: str, minimum: int, maximum: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(name, f"'{name}' must be an integer, got {type(value).__name__}.")
    if value < minimum:
        raise _bad(name, f"'{name}' must be >= {minimum}, got {value}.")
    if maximum is not None and value > maximum:
        raise _bad(name, f"'{name}' must be <= {maximum}, got {value}.")
    return value


def _number(body: dict, name: str, lo: float, hi: float) -> None:
    value = body.get(name)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(name, f"'{name}' must be a number, got {type(value).__name__}.")
    if not lo <= value <= hi:
        raise _bad(name, f"'{name}' must be between {lo} and {hi}, got {value}.")


def _model(body: dict) -> str:
    model = body.get("model")
    if model is None:
        raise InvalidRequest("Missing required parameter: 'model'.", param="model", code="missing_required_parameter")
    if not isinstance(model, str) or not model:
        raise _bad("model", "'model' must be a non-empty string (a farebox alias such as 'chat-default').")
    return model


def validate_chat(body: dict[str, Any]) -> ChatCall:
    alias = _model(body)
    messages = body.get("messages")
    if messages is None:
        raise InvalidRequest("Missing required parameter: 'messages'.", param="messages", code="missing_required_parameter")
    if not isinstance(messages, list) or not messages:
        raise _bad("messages", "'messages' must be a non-empty array of message objects.")
    for i, msg in enumerate(messages):
        _message(i, msg)
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise _bad("stream", "'stream' must be a boolean.")
    include_usage = False
    opts = body.get("stream_options")
    if opts is not None:
        if not isinstance(opts, dict):
            raise _bad("stream_options", "'stream_options' must be an object.")
        if not stream:
            raise _bad("stream_options", "'stream_options' is only allowed when 'stream' is true.")
        iu = opts.get("include_usage", False)
        if not isinstance(iu, bool):
            raise _bad("stream_options.include_usage", "'stream_options.include_usage' must be a boolean.")
        include_usage = iu
    mct = _int(body, "max_completion_tokens", 1)
    mt = _int(body, "max_tokens", 1)
    _int(body, "n", 1, MAX_CHOICES)
    _number(body, "temperature", 0, 2)
    _number(body, "top_p", 0, 1)
    _number(body, "presence_penalty", -2, 2)
    _number(body, "frequency_penalty", -2, 2)
    _tools(body)
    _response_format(body)
    stop = body.get("stop")
    if stop is not None and not isinstance(stop, str):
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop) or len(stop) > 4:
            raise _bad("stop", "'stop' must be a string or an array of up to 4 strings.")
    return ChatCall(alias, body, stream, include_usage, mct if mct is not None else mt)


def _message(i: int, msg: Any) -> None:
    p = f"messages[{i}]"
    if not isinstance(msg, dict):
        raise _bad(p, f"'{p}' must be an object with 'role' and 'content'.")
    role = msg.get("role")
    if not _one_of(role, ROLES):
        raise _bad(f"{p}.role", f"'{p}.role' must be one of {sorted(ROLES)}, got {role!r}.")
    content = msg.get("content")
    if content is None:
        if role == "assistant" and (msg.get("tool_calls") or msg.get("function_call")):
            pass
        else:
            raise InvalidRequest(f"Missing required parameter: '{p}.content'.", param=f"{p}.content", code="missing_required_parameter")
    elif isinstance(content, list):
        if not content:
            raise _bad(f"{p}.content", f"'{p}.content' must not be an empty array.")
        for j, part in enumerate(content):
            if not isinstance(part, dict) or not _one_of(part.get("type"), PART_TYPES):
                raise _bad(f"{p}.content[{j}]", f"'{p}.content[{j}]' must be a content part with a type in {sorted(PART_TYPES)}.")
            if part["type"] == "text" and not isinstance(part.get("text"), str):
                raise _bad(f"{p}.content[{j}].text", f"'{p}.content[{j}].text' must be a string.")
    elif not isinstance(content, str):
        raise _bad(f"{p}.content", f"'{p}.content' must be a string or an array of content parts.")
    if role == "tool" and not isinstance(msg.get("tool_call_id"), str):
        raise InvalidRequest(f"Missing required parameter: '{p}.tool_call_id'.", param=f"{p}.tool_call_id", code="missing_required_parameter")
    calls = msg.get("tool_calls")
    if calls is not None:
        if role != "assistant" or not isinstance(calls, list):
            raise _bad(f"{p}.tool_calls", f"'{p}.tool_calls' must be an array on an assistant message.")
        for j, call in enumerate(calls):
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not isinstance(call.get("id"), str):
                raise _bad(f"{p}.tool_calls[{j}]", f"'{p}.tool_calls[{j}]' must have an 'id' and a 'function' with a 'name'.")
            if not isinstance(fn.get("arguments", ""), str):
                raise _bad(f"{p}.tool_calls[{j}].function.arguments", "Tool call arguments must be a JSON string.")


def _tools(body: dict) -> None:
    tools = body.get("tools")
    names: set[str] = set()
    if tools is not None:
        if not isinstance(tools, list):
            raise _bad("tools", "'tools' must be an array.")
        for i, tool in enumerate(tools):
            fn = tool.get("function") if isinstance(tool, dict) else None
            if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(fn, dict):
                raise _bad(f"tools[{i}]", f"'tools[{i}]' must be {{\"type\": \"function\", \"function\": {{...}}}}.")
            if not isinstance(fn.get("name"), str) or not fn["name"]:
                raise _bad(f"tools[{i}].function.name", f"'tools[{i}].function.name' must be a non-empty string.")
            params = fn.get("parameters")
            if params is not None and not isinstance(params, dict):
                raise _bad(f"tools[{i}].function.parameters", "Tool parameters must be a JSON Schema object.")
            names.add(fn["name"])
    choice = body.get("tool_choice")
    if choice is None:
        return
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise _bad("tool_choice", "'tool_choice' must be 'none', 'auto', 'required' or a named function.")
        if choice == "required" and not names:
            raise _bad("tool_choice", "'tool_choice' is 'required' but no 'tools' were given.")
        return
    fn = choice.get("function") if isinstance(choice, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise _bad("tool_choice", "'tool_choice' must be a string or {\"type\": \"function\", \"function\": {\"name\": ...}}.")
    if fn["name"] not in names:
        raise _bad("tool_choice", f"'tool_choice' names function {fn['name']!r}, which is not in 'tools'.")


def _response_format(body: dict) -> None:
    rf = body.get("response_format")
    if rf is None:
        return
    if not isinstance(rf, dict) or not _one_of(rf.get("type"), RESPONSE_FORMATS):
        raise _bad("response_format", f"'response_format.type' must be one of {sorted(RESPONSE_FORMATS)}.")
    if rf["type"] == "json_schema":
        js = rf.get("json_schema")
        if not isinstance(js, dict) or not isinstance(js.get("name"), str):
            raise _bad("response_format.json_schema", "'response_format.json_schema' must be an object with a 'name'.")
        if "schema" in js and not isinstance(js["schema"], dict):
            raise _bad("response_format.json_schema.schema", "'response_format.json_schema.schema' must be an object.")


def validate_embeddings(body: dict[str, Any]) -> EmbeddingsCall:
    alias = _model(body)
    inp = body.get("input")
    if inp is None:
        raise InvalidRequest("Missing required parameter: 'input'.", param="input", code="missing_required_parameter")
    if isinstance(inp, str):
        texts: tuple[str, ...] = (inp,)
    elif isinstance(inp, list) and inp and all(isinstance(x, str) for x in inp):
        texts = tuple(inp)
    elif isinstance(inp, list) and inp and all(isinstance(x, int) and not isinstance(x, bool) for x in inp):
        texts = ("x" * (3 * len(inp)),)  # token ids: about one token each
    elif isinstance(inp, list) and inp and all(isinstance(x, list) and x for x in inp):
        texts = tuple("x" * (3 * len(x)) for x in inp)
    else:
        raise _bad("input", "'input' must be a non-empty string, array of strings, or array of token arrays.")
    if any(t == "" for t in texts):
        raise _bad("input", "'input' must not contain empty strings.")
    _int(body, "dimensions", 1, MAX_DIMENSIONS)
    fmt = body.get("encoding_format")
    if fmt is not None and fmt not in ("float", "base64"):
        raise _bad("encoding_format", "'encoding_format' must be 'float' or 'base64'.")
    return EmbeddingsCall(alias, body, texts)
