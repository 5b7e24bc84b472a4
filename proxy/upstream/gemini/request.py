"""OpenAI chat request -> Gemini ``generateContent`` body (the Gemini API and Vertex AI alike).

What moves where:
  system/developer messages      -> ``systemInstruction.parts``
  user text / base64 images      -> ``{"text"}`` / ``{"inlineData": {"mimeType", "data"}}`` parts
  assistant turns                -> role ``model``; ``tool_calls`` -> ``{"functionCall": {"name", "args"}}``
  ``tool`` messages              -> ``{"functionResponse": {"name", "response"}}`` in a user turn (the name is the
                                    one the answered call had; a JSON-object result is passed as the response,
                                    other text as ``{"content": text}``)
  consecutive same-role turns    -> merged
  max tokens, temperature, top_p, stop, seed, penalties -> ``generationConfig``
  ``tools`` / ``tool_choice``    -> ``functionDeclarations`` (JSON Schema) / ``functionCallingConfig``
  ``response_format`` JSON       -> ``responseMimeType: application/json`` (+ ``responseJsonSchema``)
Anything that cannot be carried raises ``UnsupportedParameter`` naming it.
"""

from __future__ import annotations

import orjson

from proxy.errors import InvalidRequest, UnsupportedParameter
from proxy.snapshot import Deployment
from proxy.upstream.chat_parts import function_tool, inline_image, json_output, text_only, tool_call

_RESERVED = ""  # no gateway-reserved tool: JSON output is native
_GENERATION = {"temperature": "temperature", "top_p": "topP", "seed": "seed",
               "presence_penalty": "presencePenalty", "frequency_penalty": "frequencyPenalty"}
_MODES = {"auto": "AUTO", "required": "ANY", "none": "NONE"}


def build_body(body: dict, dep: Deployment, max_output_tokens: int) -> dict:
    system, contents = _contents(body.get("messages"), dep)
    out: dict = {"contents": contents}
    if system:
        out["systemInstruction"] = {"parts": [{"text": s} for s in system]}
    config: dict = {"maxOutputTokens": max_output_tokens}
    for ours, theirs in _GENERATION.items():
        if body.get(ours) is not None:
            config[theirs] = body[ours]
    stop = body.get("stop")
    if stop is not None:
        config["stopSequences"] = [stop] if isinstance(stop, str) else list(stop)
    json_out = json_output(body, dep)
    if json_out is not None:
        config["responseMimeType"] = "application/json"
        if (body.get("response_format") or {}).get("type") == "json_schema":
            config["responseJsonSchema"] = json_out[0]
    out["generationConfig"] = config
    _tools(body, out, dep)
    return out


def _contents(raw: object, dep: Deployment) -> tuple[list[str], list[dict]]:
    if not isinstance(raw, list) or not raw:
        raise InvalidRequest("'messages' must be a non-empty array.", param="messages")
    system: list[str] = []
    turns: list[dict] = []
    call_names: dict[str, str] = {}  # tool call id -> function name (functionResponse names the function)
    for i, msg in enumerate(raw):
        if not isinstance(msg, dict):
            raise InvalidRequest(f"'messages[{i}]' must be an object.", param=f"messages[{i}]")
        if msg.get("name") is not None:
            raise UnsupportedParameter(f"messages[{i}].name", dep.id, "Gemini has no participant names")
        role = msg.get("role")
        if role in ("system", "developer"):
            text = text_only(msg.get("content"), f"messages[{i}].content", dep)
            if text:
                system.append(text)
            continue
        if role == "user":
            parts = _user_parts(msg.get("content"), i, dep)
        elif role == "assistant":
            role, parts = "model", _model_parts(msg, i, dep, call_names)
        elif role == "tool":
            role, parts = "user", [_function_response(msg, i, dep, call_names)]
        else:
            raise UnsupportedParameter(f"messages[{i}].role", dep.id, f"role '{role}' is not supported")
        if not parts:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["parts"].extend(parts)
        else:
            turns.append({"role": role, "parts": parts})
    return system, turns


def _user_parts(content: object, i: int, dep: Deployment) -> list[dict]:
    if content is None or isinstance(content, str):
        return [{"text": content}] if content else []
    if not isinstance(content, list):
        raise InvalidRequest(f"'messages[{i}].content' must be a string or an array.", param=f"messages[{i}].content")
    parts = []
    for j, part in enumerate(content):
        param = f"messages[{i}].content[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            if part.get("text"):
                parts.append({"text": part["text"]})
        elif kind == "image_url":
            media_type, data = inline_image(part, param, dep)
            parts.append({"inlineData": {"mimeType": media_type, "data": data}})
        else:
            raise UnsupportedParameter(f"{param}.type", dep.id, f"content part '{kind}' is not supported")
    return parts


def _model_parts(msg: dict, i: int, dep: Deployment, call_names: dict[str, str]) -> list[dict]:
    for field in ("audio", "function_call", "refusal"):
        if msg.get(field) is not None:
            raise UnsupportedParameter(f"messages[{i}].{field}", dep.id, "cannot be sent to Gemini")
    text = text_only(msg.get("content"), f"messages[{i}].content", dep)
    parts: list[dict] = [{"text": text}] if text else []
    for j, call in enumerate(msg.get("tool_calls") or ()):
        call_id, name, args = tool_call(call, f"messages[{i}].tool_calls[{j}]")
        call_names[call_id] = name
        parts.append({"functionCall": {"name": name, "args": args}})
    return parts


def _function_response(msg: dict, i: int, dep: Deployment, call_names: dict[str, str]) -> dict:
    call_id = msg.get("tool_call_id")
    if not call_id:
        raise InvalidRequest(f"'messages[{i}].tool_call_id' is required.", param=f"messages[{i}].tool_call_id")
    name = call_names.get(call_id)
    if name is None:
        raise InvalidRequest(f"'messages[{i}].tool_call_id' answers no earlier tool call; Gemini needs the "
                             "function's name.", param=f"messages[{i}].tool_call_id")
    text = text_only(msg.get("content"), f"messages[{i}].content", dep)
    try:
        value = orjson.loads(text) if text.startswith("{") else None
    except orjson.JSONDecodeError:
        value = None
    return {"functionResponse": {"name": name, "response": value if isinstance(value, dict) else {"content": text}}}


def _tools(body: dict, out: dict, dep: Deployment) -> None:
    tools = body.get("tools") or []
    choice = body.get("tool_choice")
    if not tools:
        if choice not in (None, "none", "auto"):
            raise InvalidRequest("'tool_choice' requires 'tools'.", param="tool_choice")
        return
    declarations = []
    for j, tool in enumerate(tools):
        name, description, schema = function_tool(tool, j, dep, _RESERVED)
        decl: dict = {"name": name, "parametersJsonSchema": schema}
        if description:
            decl["description"] = description
        declarations.append(decl)
    out["tools"] = [{"functionDeclarations": declarations}]
    if choice is None:
        return
    if isinstance(choice, str) and choice in _MODES:
        config: dict = {"mode": _MODES[choice]}
    elif isinstance(choice, dict) and choice.get("type") == "function" and (choice.get("function") or {}).get("name"):
        config = {"mode": "ANY", "allowedFunctionNames": [choice["function"]["name"]]}
    else:
        raise UnsupportedParameter("tool_choice", dep.id, "unrecognised tool_choice")
    out["toolConfig"] = {"functionCallingConfig": config}
