"""The Anthropic Messages surface's request: validated in Anthropic's terms, then carried as a chat request.

``validate_messages`` checks a ``POST /v1/messages`` body as the Messages API does (``model``, ``max_tokens``,
alternating ``user``/``assistant`` turns of text, image, ``tool_use`` and ``tool_result`` blocks, ``system``,
``tools``, ``tool_choice``, ``stop_sequences``, ``stream``), naming the parameter at fault. ``to_chat`` turns it
into the equivalent OpenAI chat body, which is what the gateway admits, classifies, routes and meters, and what
every dialect translates from. To an Anthropic deployment the client's own body goes instead (native
passthrough, ``proxy.upstream.passthrough``), so what the table below drops reaches Anthropic unchanged:

  system (string or text blocks)    -> a system message (so is a ``system`` turn among the messages)
  text / image blocks               -> content parts (base64 sources as data URLs)
  assistant ``tool_use`` blocks     -> ``tool_calls`` (``input`` as JSON arguments)
  user ``tool_result`` blocks       -> ``tool`` messages, before the turn's other content
  ``thinking`` blocks               -> dropped (a chat request cannot carry them back)
  ``cache_control``                 -> dropped (chat providers cache prompts by themselves)
  ``thinking`` (enabled), ``top_k`` -> kept as such: only a passed-through request carries them, any other
                                       target refuses them with a 400 naming the parameter
  tools / tool_choice               -> functions / auto, required, none or a named function
  max_tokens, stop_sequences        -> max_completion_tokens, stop
  metadata.user_id                  -> user

A server tool (``web_search``, …) only a passed-through request carries: it is left out of the chat body and
listed in ``native_only`` (a 400 naming it for any other target). A document block is a 400. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from proxy.errors import InvalidRequest

ROLES = ("user", "assistant")
BLOCKS = frozenset({"text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking"})
IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}  # Messages tool_choice.type -> chat


@dataclass(frozen=True, slots=True)
class MessagesCall:
    alias: str
    body: dict[str, Any]  # the caller's Messages body, as sent
    chat: dict[str, Any]  # the same request as an OpenAI chat body
    stream: bool
    max_tokens: int
    native_only: tuple[tuple[str, str], ...] = ()  # (param, what): only an Anthropic deployment, passed through


def _bad(param: str, message: str) -> InvalidRequest:
    return InvalidRequest(message, param=param, code="invalid_value")


def _missing(param: str) -> InvalidRequest:
    return InvalidRequest(f"{param}: Field required", param=param, code="missing_required_parameter")


def validate_messages(body: dict[str, Any], *, counting: bool = False) -> MessagesCall:
    """The call, or a 400 naming the parameter; ``counting``: ``/v1/messages/count_tokens`` (no max_tokens)."""
    model = body.get("model")
    if model is None:
        raise _missing("model")
    if not isinstance(model, str) or not model:
        raise _bad("model", "model: must be a non-empty string (a farebox alias such as 'chat-default')")
    max_tokens = body.get("max_tokens")
    if max_tokens is None and not counting:
        raise _missing("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise _bad("max_tokens", "max_tokens: must be an integer >= 1")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _bad("stream", "stream: must be a boolean")
    for name, hi in (("temperature", 1.0), ("top_p", 1.0)):
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= hi):
            raise _bad(name, f"{name}: must be a number between 0 and {hi:g}")
    native_only: list[tuple[str, str]] = []
    chat = to_chat(body, native_only)
    if max_tokens is not None:
        chat["max_completion_tokens"] = max_tokens
    return MessagesCall(model, body, chat, stream and not counting, max_tokens or 1, tuple(native_only))


def to_chat(body: dict[str, Any], native_only: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    """The OpenAI chat body of a Messages body (``max_tokens`` set by the caller of this)."""
    out: dict[str, Any] = {"model": body["model"], "messages": [*_system(body.get("system")), *_turns(body)]}
    for name in ("temperature", "top_p", "top_k"):
        if body.get(name) is not None:
            out[name] = body[name]  # top_k: carried by the native passthrough only (a 400 naming it elsewhere)
    thinking = body.get("thinking")
    if thinking is not None:
        if not isinstance(thinking, dict) or not isinstance(thinking.get("type"), str):
            raise _bad("thinking", "thinking: must be an object with a type ('enabled', 'disabled', ...)")
        if thinking["type"] != "disabled":
            out["thinking"] = thinking  # as top_k: only an Anthropic deployment, passed through, carries it
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise _bad("stop_sequences", "stop_sequences: must be an array of strings")
        if stops:
            out["stop"] = stops
    metadata = body.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, dict):
            raise _bad("metadata", "metadata: must be an object")
        if isinstance(metadata.get("user_id"), str):
            out["user"] = metadata["user_id"]
    _tools(body, out, native_only)
    if body.get("stream") is True:
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return out


def _system(system: object) -> list[dict[str, Any]]:
    if system is None or system == "":
        return []
    if isinstance(system, str):
        return [{"role": "system", "content": system}]
    if not isinstance(system, list) or not all(isinstance(b, dict) and b.get("type") == "text" for b in system):
        raise _bad("system", "system: must be a string or an array of text blocks")
    text = "\n\n".join(str(b.get("text") or "") for b in system)
    return [{"role": "system", "content": text}] if text else []


def _turns(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if messages is None:
        raise _missing("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("messages", "messages: must be a non-empty array")
    out: list[dict[str, Any]] = []
    for i, msg in enumerate(messages):
        p = f"messages.{i}"
        if isinstance(msg, dict) and msg.get("role") == "system":  # a system turn inside the conversation
            try:
                out += _system(msg.get("content"))
            except InvalidRequest:
                raise _bad(f"{p}.content", f"{p}.content: a system turn is a string or text blocks") from None
            continue
        if not isinstance(msg, dict) or msg.get("role") not in ROLES:
            raise _bad(f"{p}.role", f"{p}.role: must be 'user', 'assistant' or 'system'")
        content = msg.get("content")
        if isinstance(content, str):
            out.append({"role": msg["role"], "content": content})
        elif isinstance(content, list):
            out.extend(_blocks(msg["role"], content, p))
        else:
            raise _bad(f"{p}.content", f"{p}.content: must be a string or an array of content blocks")
    return out


def _blocks(role: str, blocks: list[Any], p: str) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        q = f"{p}.content.{j}"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind not in BLOCKS:
            raise _bad(f"{q}.type", f"{q}.type: {kind!r} is not a content block farebox can carry "
                                    f"(one of {sorted(BLOCKS)})")
        if kind == "text":
            if not isinstance(block.get("text"), str):
                raise _bad(f"{q}.text", f"{q}.text: must be a string")
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "image":
            parts.append(_image(block.get("source"), q))
        elif kind == "tool_use":
            if role != "assistant" or not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                raise _bad(q, f"{q}: a tool_use block belongs to an assistant turn and has an id and a name")
            calls.append({"id": block["id"], "type": "function",
                          "function": {"name": block["name"], "arguments": orjson.dumps(block.get("input") or {}).decode()}})
        elif kind == "tool_result":
            if role != "user" or not isinstance(block.get("tool_use_id"), str):
                raise _bad(q, f"{q}: a tool_result block belongs to a user turn and has a tool_use_id")
            results.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": _result_text(block, q)})
    out: list[dict[str, Any]] = list(results)
    if role == "assistant":
        if parts or calls:
            msg: dict[str, Any] = {"role": "assistant", "content": _joined(parts) if parts else None}
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
    elif parts:
        out.append({"role": "user", "content": parts})
    return out


def _joined(parts: list[dict[str, Any]]) -> str:
    return "".join(part.get("text") or "" for part in parts if part.get("type") == "text")


def _result_text(block: dict[str, Any], q: str) -> str:
    content = block.get("content")
    text = content if isinstance(content, str) else "" if content is None else None
    if text is None:
        if not isinstance(content, list) or not all(isinstance(b, dict) and b.get("type") == "text" for b in content):
            raise _bad(f"{q}.content", f"{q}.content: a tool result must be a string or text blocks")
        text = "\n".join(str(b.get("text") or "") for b in content)
    return f"Error: {text}" if block.get("is_error") is True else text


def _image(source: object, q: str) -> dict[str, Any]:
    if not isinstance(source, dict):
        raise _missing(f"{q}.source")
    if source.get("type") == "base64":
        media = source.get("media_type")
        if media not in IMAGE_TYPES or not isinstance(source.get("data"), str):
            raise _bad(f"{q}.source", f"{q}.source: a base64 image needs media_type in {sorted(IMAGE_TYPES)} and data")
        return {"type": "image_url", "image_url": {"url": f"data:{media};base64,{source['data']}"}}
    if source.get("type") == "url" and isinstance(source.get("url"), str):
        return {"type": "image_url", "image_url": {"url": source["url"]}}
    raise _bad(f"{q}.source.type", f"{q}.source.type: must be 'base64' or 'url'")


def _tools(body: dict[str, Any], out: dict[str, Any], native_only: list[tuple[str, str]] | None) -> None:
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _bad("tools", "tools: must be an array")
        functions = []
        for i, tool in enumerate(tools):
            if not isinstance(tool, dict) or not isinstance(tool.get("name"), str) or not tool["name"]:
                raise _bad(f"tools.{i}.name", f"tools.{i}.name: required")
            if tool.get("type") not in (None, "custom"):
                if native_only is None:
                    raise _bad(f"tools.{i}.type", f"tools.{i}.type: the server tool {tool['type']!r} needs an "
                                                 "Anthropic deployment")
                native_only.append((f"tools.{i}.type", f"The server tool {tool['type']!r}"))
                continue
            schema = tool.get("input_schema")
            if not isinstance(schema, dict):
                raise _missing(f"tools.{i}.input_schema")
            fn: dict[str, Any] = {"name": tool["name"], "parameters": schema}
            if isinstance(tool.get("description"), str):
                fn["description"] = tool["description"]
            functions.append({"type": "function", "function": fn})
        if functions:
            out["tools"] = functions
    choice = body.get("tool_choice")
    if choice is None:
        return
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind in _TOOL_CHOICES:
        if kind != "none" and not out.get("tools"):
            raise _bad("tool_choice", "tool_choice: requires tools")
        out["tool_choice"] = _TOOL_CHOICES[kind]
    elif kind == "tool" and isinstance(choice.get("name"), str):
        out["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    else:
        raise _bad("tool_choice", "tool_choice: must be {type: auto | any | none} or {type: tool, name}")
    if choice.get("disable_parallel_tool_use") is True and kind != "none":
        out["parallel_tool_calls"] = False
