"""The OpenAI Responses surface's request: validated in the Responses API's terms, carried as a chat request.

``validate_response`` checks a ``POST /v1/responses`` body (``model``; ``input`` as a string or a list of
items; ``instructions``; function ``tools`` and ``tool_choice``; ``text.format``; ``reasoning.effort``;
``max_output_tokens``; ``metadata``; ``store``; ``stream``), naming the parameter at fault. ``to_chat`` turns it
into the equivalent OpenAI chat body, which is what the gateway admits, classifies, routes and meters:

  instructions                         -> a system message, first
  a string input                       -> one user message
  message items (user, assistant,      -> messages; input_text / output_text as text, input_image as an image
  system, developer)                      part
  function_call items                  -> an assistant message's ``tool_calls`` (consecutive calls together)
  function_call_output items           -> ``tool`` messages
  reasoning items                      -> dropped (a chat request cannot carry them back)
  tools (function) / tool_choice       -> chat functions / auto, none, required or a named function
  text.format (json_schema, json_object) -> response_format
  reasoning.effort                     -> reasoning_effort
  max_output_tokens                    -> max_completion_tokens

``earlier`` is what ``previous_response_id`` continues (``stored.history``): its items come first, and an
``item_reference`` names one of them. What farebox cannot carry yet is a 400 naming it: built-in tools (web
search, file search, computer use, …), ``background``. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from proxy.errors import InvalidRequest

NATIVE_ITEMS = frozenset({"custom_tool_call", "custom_tool_call_output", "web_search_call", "file_search_call",
                          "computer_call", "computer_call_output", "local_shell_call", "local_shell_call_output",
                          "mcp_call", "mcp_list_tools", "image_generation_call", "code_interpreter_call"})
ROLES = frozenset({"user", "assistant", "system", "developer"})
EFFORTS = frozenset({"minimal", "low", "medium", "high", "none", "xhigh"})
_CHOICES = {"auto": "auto", "none": "none", "required": "required"}


@dataclass(frozen=True, slots=True)
class ResponsesCall:
    alias: str
    body: dict[str, Any]  # the caller's Responses body, as sent
    chat: dict[str, Any]  # the same request as an OpenAI chat body
    stream: bool
    max_output_tokens: int | None
    native_only: tuple[tuple[str, str], ...] = ()  # (param, what): only a deployment serving Responses carries it


def _bad(param: str, message: str) -> InvalidRequest:
    return InvalidRequest(message, param=param, code="invalid_value")


def _unsupported(param: str, what: str) -> InvalidRequest:
    return InvalidRequest(f"{what} is not available through farebox yet.", param=param, code="unsupported_parameter")


def validate_response(body: dict[str, Any], earlier: Sequence[dict[str, Any]] = ()) -> ResponsesCall:
    model = body.get("model")
    if model is None:
        raise InvalidRequest("Missing required parameter: 'model'.", param="model", code="missing_required_parameter")
    if not isinstance(model, str) or not model:
        raise _bad("model", "'model' must be a non-empty string (a farebox alias such as 'chat-default').")
    if body.get("background") is True:
        raise _unsupported("background", "Background responses")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise _bad("stream", "'stream' must be a boolean.")
    cap = body.get("max_output_tokens")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 16):
        raise _bad("max_output_tokens", "'max_output_tokens' must be an integer >= 16.")
    store = body.get("store", True)
    if store is not None and not isinstance(store, bool):
        raise _bad("store", "'store' must be a boolean.")
    metadata = body.get("metadata")
    if metadata is not None and (not isinstance(metadata, dict) or len(metadata) > 16 or not all(
            isinstance(k, str) and isinstance(v, str) and len(k) <= 64 and len(v) <= 512 for k, v in metadata.items())):
        raise _bad("metadata", "'metadata' must be an object of at most 16 string pairs (keys <= 64, values <= 512).")
    for name, hi in (("temperature", 2.0), ("top_p", 1.0)):
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= hi):
            raise _bad(name, f"'{name}' must be a number between 0 and {hi:g}.")
    native_only: list[tuple[str, str]] = []
    chat = to_chat(body, earlier, native_only)
    return ResponsesCall(model, body, chat, stream, cap, tuple(native_only))


def to_chat(body: dict[str, Any], earlier: Sequence[dict[str, Any]] = (),
            native_only: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    """The chat body; what a chat request cannot carry but a deployment serving the Responses API can (built-in
    and custom tools, their calls in the input) is left out and listed in ``native_only`` (None: a 400)."""
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise _bad("instructions", "'instructions' must be a string.")
        if instructions:
            messages.append({"role": "system", "content": instructions})
    messages += _input(body.get("input"), earlier, native_only)
    out: dict[str, Any] = {"model": body["model"], "messages": messages}
    for name in ("temperature", "top_p", "parallel_tool_calls"):
        if body.get(name) is not None:
            out[name] = body[name]
    user = body.get("safety_identifier") or body.get("user")
    if isinstance(user, str):
        out["user"] = user
    if body.get("max_output_tokens") is not None:
        out["max_completion_tokens"] = body["max_output_tokens"]
    _tools(body, out, native_only)
    _text(body.get("text"), out)
    reasoning = body.get("reasoning")
    if reasoning is not None:
        effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
        if not isinstance(reasoning, dict) or (effort is not None and effort not in EFFORTS):
            raise _bad("reasoning.effort", f"'reasoning.effort' must be one of {sorted(EFFORTS)}.")
        if effort is not None:
            out["reasoning_effort"] = effort
    if body.get("stream") is True:
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return out


def _input(raw: object, earlier: Sequence[dict[str, Any]],
           native_only: list[tuple[str, str]] | None = None) -> list[dict[str, Any]]:
    if raw is None:
        raise InvalidRequest("Missing required parameter: 'input'.", param="input", code="missing_required_parameter")
    if isinstance(raw, str):
        raw = [{"role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise _bad("input", "'input' must be a string or a non-empty array of input items.")
    known = {item["id"]: item for item in earlier if isinstance(item.get("id"), str)}
    out: list[dict[str, Any]] = []
    labelled = [("previous_response_id", item) for item in earlier] + [(f"input[{i}]", x) for i, x in enumerate(raw)]
    for p, item in labelled:
        if isinstance(item, dict) and item.get("type") == "item_reference":
            item = known.get(item.get("id"))  # type: ignore[arg-type]
            if item is None:
                raise _bad(f"{p}.id", f"'{p}.id' names no item of the conversation 'previous_response_id' continues.")
        if not isinstance(item, dict):
            raise _bad(p, f"'{p}' must be an input item object.")
        kind = item.get("type", "message")
        if kind == "message":
            out.append(_message(item, p))
        elif kind == "function_call":
            for name in ("call_id", "name", "arguments"):
                if not isinstance(item.get(name), str):
                    raise _bad(f"{p}.{name}", f"'{p}.{name}' must be a string.")
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}
            prev = out[-1] if out else None  # one assistant turn: its text, then its calls
            if prev is not None and prev["role"] == "assistant" and ("tool_calls" in prev or prev.get("_text")):
                prev.setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            if not isinstance(item.get("call_id"), str) or not isinstance(output, (str, list)):
                raise _bad(p, f"'{p}' needs a 'call_id' and an 'output'.")
            text = output if isinstance(output, str) else "".join(
                str(part.get("text") or "") for part in output if isinstance(part, dict))
            out.append({"role": "tool", "tool_call_id": item["call_id"], "content": text})
        elif kind in NATIVE_ITEMS and native_only is not None:
            native_only.append((f"{p}.type", f"An input item of type {kind!r}"))
        elif kind == "reasoning":
            continue  # reasoning a chat request cannot carry back; the model reasons again
        else:
            raise _bad(f"{p}.type", f"'{p}.type' {kind!r} is not an input item farebox can carry.")
    for msg in out:
        msg.pop("_text", None)
    return out


def _message(item: dict[str, Any], p: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in ROLES:
        raise _bad(f"{p}.role", f"'{p}.role' must be one of {sorted(ROLES)}.")
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content, "_text": role == "assistant"}
    if not isinstance(content, list):
        raise _bad(f"{p}.content", f"'{p}.content' must be a string or an array of content parts.")
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        q = f"{p}.content[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text"):
            if not isinstance(part.get("text"), str):
                raise _bad(f"{q}.text", f"'{q}.text' must be a string.")
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str):
                raise _unsupported(f"{q}.file_id", "An image by file id")
            image: dict[str, Any] = {"url": url}
            if part.get("detail") in ("low", "high", "auto"):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        elif kind == "refusal":
            parts.append({"type": "text", "text": str(part.get("refusal") or "")})
        else:
            raise _bad(f"{q}.type", f"'{q}.type' {kind!r} is not a content part farebox can carry.")
    if role != "user":  # system, developer and assistant turns are text in chat
        return {"role": role, "content": "".join(part.get("text") or "" for part in parts), "_text": role == "assistant"}
    return {"role": role, "content": parts}


def _function(tool: Any, p: str) -> dict[str, Any]:
    if not isinstance(tool, dict) or tool.get("type") != "function":
        raise _unsupported(f"{p}.type", f"A {tool.get('type') if isinstance(tool, dict) else tool!r} tool in a namespace")
    if not isinstance(tool.get("name"), str) or not tool["name"]:
        raise _bad(f"{p}.name", f"'{p}.name' must be a non-empty string.")
    fn: dict[str, Any] = {"name": tool["name"], "parameters": tool.get("parameters") or {"type": "object"}}
    for name in ("description", "strict"):
        if tool.get(name) is not None:
            fn[name] = tool[name]
    return {"type": "function", "function": fn}


def _tools(body: dict[str, Any], out: dict[str, Any], native_only: list[tuple[str, str]] | None = None) -> None:
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _bad("tools", "'tools' must be an array.")
        functions = []
        for i, tool in enumerate(tools):
            kind = tool.get("type") if isinstance(tool, dict) else None
            if kind == "namespace" and isinstance(tool.get("tools"), list):  # a named group of functions
                functions += [_function(fn, f"tools[{i}].tools[{j}]") for j, fn in enumerate(tool["tools"])]
                continue
            if kind != "function":
                if native_only is None or not isinstance(kind, str):
                    raise _unsupported(f"tools[{i}].type", f"The built-in tool {kind!r}")
                native_only.append((f"tools[{i}].type", f"The built-in tool {kind!r}"))
                continue
            functions.append(_function(tool, f"tools[{i}]"))
        if functions:
            out["tools"] = functions
    choice = body.get("tool_choice")
    if choice is None:
        return
    if isinstance(choice, str) and choice in _CHOICES:
        out["tool_choice"] = _CHOICES[choice]
    elif isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        out["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    else:
        raise _bad("tool_choice", "'tool_choice' must be 'auto', 'none', 'required' or {type: function, name}.")


def _text(text: object, out: dict[str, Any]) -> None:
    if text is None:
        return
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(text, dict) or (fmt is not None and not isinstance(fmt, dict)):
        raise _bad("text.format", "'text.format' must be an object.")
    kind = (fmt or {}).get("type", "text")
    if kind == "json_schema":
        if not isinstance(fmt.get("name"), str) or not isinstance(fmt.get("schema"), dict):
            raise _bad("text.format", "'text.format' of type json_schema needs a 'name' and a 'schema'.")
        spec = {k: fmt[k] for k in ("name", "schema", "strict", "description") if fmt.get(k) is not None}
        out["response_format"] = {"type": "json_schema", "json_schema": spec}
    elif kind == "json_object":
        out["response_format"] = {"type": "json_object"}
    elif kind != "text":
        raise _bad("text.format.type", "'text.format.type' must be text, json_schema or json_object.")
