"""OpenAI chat request -> Bedrock ``Converse`` / ``ConverseStream`` request body.

What moves where:
  system/developer messages      -> ``system`` text blocks
  user/assistant text            -> ``{"text"}`` content blocks
  images (base64 data URLs)      -> ``{"image": {"format", "source": {"bytes"}}}`` (Bedrock fetches no URLs)
  assistant ``tool_calls``       -> ``{"toolUse": {"toolUseId", "name", "input"}}``
  ``tool`` messages              -> ``{"toolResult": {"toolUseId", "content": [{"text"}]}}`` in a user turn
  consecutive same-role turns    -> merged (Converse requires alternation)
  max tokens, temperature, top_p, stop -> ``inferenceConfig``
  ``tools`` / ``tool_choice``    -> ``toolConfig`` (``auto`` / ``any`` / ``tool``; ``none`` drops the tools)
  ``response_format`` JSON       -> a forced tool named ``JSON_TOOL`` whose input the response side turns back
                                    into text (as for Anthropic)
  ``service_tier`` priority/flex -> ``serviceTier: {"type"}`` (auto/default: Bedrock's default tier, not sent)
Anything that cannot be carried raises ``UnsupportedParameter`` naming it.
"""

from __future__ import annotations

from proxy.errors import InvalidRequest, UnsupportedParameter
from proxy.snapshot import Deployment
from proxy.upstream.chat_parts import function_tool, inline_image, json_output, text_only, tool_call

JSON_TOOL = "json_response"
_JSON_DESCRIPTION = "Respond to the user with JSON by calling this tool."
SERVICE_TIERS = ("priority", "flex")  # Bedrock's tiers besides its default, as the API names them
_FORMATS = {"image/jpeg": "jpeg", "image/png": "png", "image/gif": "gif", "image/webp": "webp"}


def build_body(body: dict, dep: Deployment, max_output_tokens: int) -> dict:
    """The Converse body for an (already validated) OpenAI chat body; the model id is in the URL."""
    system, messages = _messages(body.get("messages"), dep)
    out: dict = {"messages": messages}
    if system:
        out["system"] = [{"text": s} for s in system]
    config: dict = {"maxTokens": max_output_tokens}
    if body.get("temperature") is not None:
        config["temperature"] = body["temperature"]
    if body.get("top_p") is not None:
        config["topP"] = body["top_p"]
    stop = body.get("stop")
    if stop is not None:
        config["stopSequences"] = [stop] if isinstance(stop, str) else list(stop)
    out["inferenceConfig"] = config
    tool_config = _tools(body, dep)
    if tool_config is not None:
        out["toolConfig"] = tool_config
    tier = _tier(body.get("service_tier"), dep)
    if tier is not None:
        out["serviceTier"] = {"type": tier}
    return out


def _tier(raw: object, dep: Deployment) -> str | None:
    """Bedrock's ``serviceTier.type`` for the OpenAI ``service_tier`` asked (None: the standard tier)."""
    if raw is None or raw in ("auto", "default"):
        return None
    if raw in SERVICE_TIERS:
        return raw
    raise UnsupportedParameter("service_tier", dep.id,
                               f"Bedrock serves {', '.join(SERVICE_TIERS)} or default, not {raw!r}")


def _messages(raw: object, dep: Deployment) -> tuple[list[str], list[dict]]:
    if not isinstance(raw, list) or not raw:
        raise InvalidRequest("'messages' must be a non-empty array.", param="messages")
    system: list[str] = []
    turns: list[dict] = []
    for i, msg in enumerate(raw):
        if not isinstance(msg, dict):
            raise InvalidRequest(f"'messages[{i}]' must be an object.", param=f"messages[{i}]")
        if msg.get("name") is not None:
            raise UnsupportedParameter(f"messages[{i}].name", dep.id, "Bedrock has no participant names")
        role = msg.get("role")
        if role in ("system", "developer"):
            text = text_only(msg.get("content"), f"messages[{i}].content", dep)
            if text:
                system.append(text)
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
    return system, turns


def _user_blocks(content: object, i: int, dep: Deployment) -> list[dict]:
    if content is None or isinstance(content, str):
        return [{"text": content}] if content else []
    if not isinstance(content, list):
        raise InvalidRequest(f"'messages[{i}].content' must be a string or an array.", param=f"messages[{i}].content")
    blocks = []
    for j, part in enumerate(content):
        param = f"messages[{i}].content[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            if part.get("text"):
                blocks.append({"text": part["text"]})
        elif kind == "image_url":
            media_type, data = inline_image(part, param, dep)
            blocks.append({"image": {"format": _FORMATS[media_type], "source": {"bytes": data}}})
        else:
            raise UnsupportedParameter(f"{param}.type", dep.id, f"content part '{kind}' is not supported")
    return blocks


def _assistant_blocks(msg: dict, i: int, dep: Deployment) -> list[dict]:
    for field in ("audio", "function_call", "refusal"):
        if msg.get(field) is not None:
            raise UnsupportedParameter(f"messages[{i}].{field}", dep.id, "cannot be sent to Bedrock")
    text = text_only(msg.get("content"), f"messages[{i}].content", dep)
    blocks: list[dict] = [{"text": text}] if text else []
    for j, call in enumerate(msg.get("tool_calls") or ()):
        call_id, name, args = tool_call(call, f"messages[{i}].tool_calls[{j}]")
        blocks.append({"toolUse": {"toolUseId": call_id, "name": name, "input": args}})
    return blocks


def _tool_result(msg: dict, i: int, dep: Deployment) -> dict:
    if not msg.get("tool_call_id"):
        raise InvalidRequest(f"'messages[{i}].tool_call_id' is required.", param=f"messages[{i}].tool_call_id")
    text = text_only(msg.get("content"), f"messages[{i}].content", dep)
    return {"toolResult": {"toolUseId": msg["tool_call_id"], "content": [{"text": text}] if text else []}}


def _tools(body: dict, dep: Deployment) -> dict | None:
    tools = body.get("tools") or []
    json_out = json_output(body, dep)
    if json_out is not None:
        if tools:
            raise UnsupportedParameter("response_format", dep.id, "JSON output cannot be combined with tools on Bedrock")
        schema, description = json_out
        spec = {"name": JSON_TOOL, "description": description or _JSON_DESCRIPTION, "inputSchema": {"json": schema}}
        return {"tools": [{"toolSpec": spec}], "toolChoice": {"tool": {"name": JSON_TOOL}}}
    choice = body.get("tool_choice")
    if not tools:
        if choice not in (None, "none", "auto"):
            raise InvalidRequest("'tool_choice' requires 'tools'.", param="tool_choice")
        return None
    specs = []
    for j, tool in enumerate(tools):
        name, description, schema = function_tool(tool, j, dep, JSON_TOOL)
        spec: dict = {"name": name, "inputSchema": {"json": schema}}
        if description:
            spec["description"] = description
        specs.append({"toolSpec": spec})
    if choice == "none":  # Converse has no "none": the model is not offered the tools
        return None
    out: dict = {"tools": specs}
    if choice in (None, "auto"):
        out["toolChoice"] = {"auto": {}}
    elif choice == "required":
        out["toolChoice"] = {"any": {}}
    elif isinstance(choice, dict) and choice.get("type") == "function" and (choice.get("function") or {}).get("name"):
        out["toolChoice"] = {"tool": {"name": choice["function"]["name"]}}
    else:
        raise UnsupportedParameter("tool_choice", dep.id, "unrecognised tool_choice")
    return out
