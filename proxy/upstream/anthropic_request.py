"""OpenAI chat request -> Anthropic Messages request body.

What moves where:
  system/developer messages      -> top-level ``system`` (joined by blank lines)
  user/assistant text and images -> content blocks (data: URLs as base64 sources)
  assistant ``tool_calls``       -> ``tool_use`` blocks (arguments parsed to ``input``)
  ``tool`` messages              -> ``tool_result`` blocks in a user turn
  consecutive same-role turns    -> merged (Anthropic requires alternation)
  ``response_format`` JSON       -> a forced tool named ``JSON_TOOL`` whose input
                                    the response side turns back into text
Anything that cannot be carried raises ``UnsupportedParameter`` naming it.
"""

from __future__ import annotations

from proxy.errors import InvalidRequest, UnsupportedParameter
from proxy.snapshot import Deployment
from proxy.upstream.chat_parts import DATA_URL, EMPTY_SCHEMA, IMAGE_TYPES, PERMISSIVE_SCHEMA, arguments, text_only

# Reserved tool name for JSON mode; callers may not define a tool with it.
JSON_TOOL = "json_response"
_JSON_TOOL_DESCRIPTION = "Respond to the user with JSON by calling this tool."
_TOOL_CHOICES = {"auto": {"type": "auto"}, "required": {"type": "any"}, "none": {"type": "none"}}


def build_body(body: dict, deployment: Deployment, max_output_tokens: int) -> dict:
    """The Messages API body for an (already validated) OpenAI chat body."""
    system, messages = _messages(body.get("messages"), deployment)
    out: dict = {"model": deployment.model, "max_tokens": max_output_tokens}
    if system:
        out["system"] = system
    out["messages"] = messages
    for key in ("temperature", "top_p"):
        if body.get(key) is not None:
            out[key] = body[key]
    stop = body.get("stop")
    if stop is not None:
        out["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    user = body.get("safety_identifier") or body.get("user")
    if user:
        out["metadata"] = {"user_id": user}
    _tools(body, out, deployment)
    _response_format(body, out, deployment)
    if body.get("stream"):
        out["stream"] = True
    return out


def _messages(raw: object, dep: Deployment) -> tuple[str, list[dict]]:
    if not isinstance(raw, list) or not raw:
        raise InvalidRequest("'messages' must be a non-empty array.", param="messages")
    system: list[str] = []
    turns: list[dict] = []
    for i, msg in enumerate(raw):
        if not isinstance(msg, dict):
            raise InvalidRequest(f"'messages[{i}]' must be an object.", param=f"messages[{i}]")
        if msg.get("name") is not None:
            raise UnsupportedParameter(f"messages[{i}].name", dep.id, "Anthropic has no participant names")
        role = msg.get("role")
        if role in ("system", "developer"):
            system.append(text_only(msg.get("content"), f"messages[{i}].content", dep))
            continue
        if role == "user":
            blocks = _user_blocks(msg.get("content"), i, dep)
        elif role == "assistant":
            blocks = _assistant_blocks(msg, i, dep)
        elif role == "tool":
            role, blocks = "user", [_tool_result(msg, i, dep)]
        else:
            raise UnsupportedParameter(f"messages[{i}].role", dep.id, f"role '{role}' is not supported")
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return "\n\n".join(s for s in system if s), turns


def _user_blocks(content: object, i: int, dep: Deployment) -> list[dict]:
    if content is None or isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise InvalidRequest(f"'messages[{i}].content' must be a string or an array.", param=f"messages[{i}].content")
    blocks = []
    for j, part in enumerate(content):
        param = f"messages[{i}].content[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            if part.get("text"):
                blocks.append({"type": "text", "text": part["text"]})
        elif kind == "image_url":
            blocks.append(_image(part.get("image_url"), param, dep))
        else:
            raise UnsupportedParameter(f"{param}.type", dep.id, f"content part '{kind}' is not supported")
    return blocks


def _image(image: object, param: str, dep: Deployment) -> dict:
    url = image.get("url") if isinstance(image, dict) else None
    if not isinstance(url, str):
        raise InvalidRequest(f"'{param}.image_url.url' is required.", param=f"{param}.image_url.url")
    match = DATA_URL.match(url)
    if match:
        media_type = match.group(1).lower()
        if media_type not in IMAGE_TYPES:
            raise UnsupportedParameter(f"{param}.image_url.url", dep.id, f"image type '{media_type}' is not supported")
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": match.group(2)}}
    if url.startswith(("https://", "http://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    raise UnsupportedParameter(f"{param}.image_url.url", dep.id, "only https and base64 data URLs are supported")


def _assistant_blocks(msg: dict, i: int, dep: Deployment) -> list[dict]:
    for field in ("audio", "function_call", "refusal"):
        if msg.get(field) is not None:
            raise UnsupportedParameter(f"messages[{i}].{field}", dep.id, "cannot be sent to Anthropic")
    text = text_only(msg.get("content"), f"messages[{i}].content", dep)
    blocks: list[dict] = [{"type": "text", "text": text}] if text else []
    for j, call in enumerate(msg.get("tool_calls") or ()):
        param = f"messages[{i}].tool_calls[{j}]"
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not call.get("id") or not fn.get("name"):
            raise InvalidRequest(f"'{param}' needs an id and a function name.", param=param)
        blocks.append({"type": "tool_use", "id": call["id"], "name": fn["name"], "input": arguments(fn.get("arguments"), param)})
    return blocks


def _tool_result(msg: dict, i: int, dep: Deployment) -> dict:
    if not msg.get("tool_call_id"):
        raise InvalidRequest(f"'messages[{i}].tool_call_id' is required.", param=f"messages[{i}].tool_call_id")
    block: dict = {"type": "tool_result", "tool_use_id": msg["tool_call_id"]}
    text = text_only(msg.get("content"), f"messages[{i}].content", dep)
    if text:
        block["content"] = text
    return block


def _tools(body: dict, out: dict, dep: Deployment) -> None:
    tools = body.get("tools") or []
    if tools:
        out["tools"] = [_tool(tool, j, dep) for j, tool in enumerate(tools)]
    choice = body.get("tool_choice")
    mapped: dict | None
    if choice is None:
        mapped = None
    elif isinstance(choice, str) and choice in _TOOL_CHOICES:
        mapped = dict(_TOOL_CHOICES[choice])
    elif isinstance(choice, dict) and choice.get("type") == "function" and (choice.get("function") or {}).get("name"):
        mapped = {"type": "tool", "name": choice["function"]["name"]}
    else:
        raise UnsupportedParameter("tool_choice", dep.id, "unrecognised tool_choice")
    if not tools:
        if mapped is not None and mapped["type"] != "none":
            raise InvalidRequest("'tool_choice' requires 'tools'.", param="tool_choice")
        return
    if body.get("parallel_tool_calls") is False and (mapped is None or mapped["type"] != "none"):
        mapped = {**(mapped or {"type": "auto"}), "disable_parallel_tool_use": True}
    if mapped is not None:
        out["tool_choice"] = mapped


def _tool(tool: object, j: int, dep: Deployment) -> dict:
    if not isinstance(tool, dict) or tool.get("type") != "function":
        kind = tool.get("type") if isinstance(tool, dict) else None
        raise UnsupportedParameter(f"tools[{j}].type", dep.id, f"tool type '{kind}' is not supported")
    fn = tool.get("function") or {}
    name = fn.get("name")
    if not name:
        raise InvalidRequest(f"'tools[{j}].function.name' is required.", param=f"tools[{j}].function.name")
    if name == JSON_TOOL:
        raise UnsupportedParameter(f"tools[{j}].function.name", dep.id, f"'{JSON_TOOL}' is reserved by the gateway")
    # ``strict`` has no Anthropic counterpart; the schema is still enforced as input_schema.
    out = {"name": name, "input_schema": fn.get("parameters") or EMPTY_SCHEMA}
    if fn.get("description"):
        out["description"] = fn["description"]
    return out


def _response_format(body: dict, out: dict, dep: Deployment) -> None:
    fmt = body.get("response_format") or {}
    kind = fmt.get("type")
    if kind not in ("json_schema", "json_object"):
        return
    if body.get("tools"):
        raise UnsupportedParameter("response_format", dep.id, "JSON output cannot be combined with tools on Anthropic")
    description = _JSON_TOOL_DESCRIPTION
    schema = PERMISSIVE_SCHEMA
    if kind == "json_schema":
        spec = fmt.get("json_schema") or {}
        schema = spec.get("schema") or PERMISSIVE_SCHEMA
        if schema.get("type", "object") != "object":
            raise UnsupportedParameter("response_format.json_schema.schema", dep.id, "the schema root must be an object")
        description = spec.get("description") or description
    out["tools"] = [{"name": JSON_TOOL, "description": description, "input_schema": schema}]
    out["tool_choice"] = {"type": "tool", "name": JSON_TOOL, "disable_parallel_tool_use": True}
