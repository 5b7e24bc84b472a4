"""Pieces of an OpenAI chat request every translating dialect reads the same way.

Text-only content (system turns, tool results), a tool call's JSON arguments, base64 ``data:`` image URLs, the
function tools and the name a tool result answers. Each raises ``InvalidRequest`` / ``UnsupportedParameter``
naming the parameter, so a request one dialect cannot carry fails the same way on all of them.
"""

from __future__ import annotations

import re

import orjson

from proxy.errors import InvalidRequest, UnsupportedParameter
from proxy.snapshot import Deployment

IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
DATA_URL = re.compile(r"^data:([\w.+-]+/[\w.+-]+);base64,(.*)$", re.DOTALL)
EMPTY_SCHEMA = {"type": "object", "properties": {}}
PERMISSIVE_SCHEMA = {"type": "object", "additionalProperties": True}


def text_only(content: object, param: str, dep: Deployment) -> str:
    """A message's content as text: a string, or text parts joined by newlines; any other part is refused."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise InvalidRequest(f"'{param}' must be a string or an array of parts.", param=param)
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text":
            raise UnsupportedParameter(f"{param}[{j}]", dep.id, "only text parts are allowed here")
        texts.append(part.get("text") or "")
    return "\n".join(texts)


def arguments(raw: object, param: str) -> dict:
    """A tool call's ``function.arguments`` JSON as an object ({} when empty)."""
    if raw is None or raw == "":
        return {}
    try:
        value = orjson.loads(raw) if isinstance(raw, (str, bytes)) else None
    except orjson.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise InvalidRequest(f"'{param}.function.arguments' must be a JSON object.", param=f"{param}.function.arguments")
    return value


def image_url(part: dict, param: str) -> str:
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else None
    if not isinstance(url, str):
        raise InvalidRequest(f"'{param}.image_url.url' is required.", param=f"{param}.image_url.url")
    return url


def inline_image(part: dict, param: str, dep: Deployment) -> tuple[str, str]:
    """(media type, base64 data) of an ``image_url`` part that must be inline (a ``data:`` URL)."""
    url = image_url(part, param)
    match = DATA_URL.match(url)
    if match is None:
        raise UnsupportedParameter(f"{param}.image_url.url", dep.id, "only base64 data URLs are supported")
    media_type = match.group(1).lower()
    if media_type not in IMAGE_TYPES:
        raise UnsupportedParameter(f"{param}.image_url.url", dep.id, f"image type '{media_type}' is not supported")
    return media_type, match.group(2)


def function_tool(tool: object, j: int, dep: Deployment, reserved: str) -> tuple[str, str | None, dict]:
    """(name, description, parameters schema) of ``tools[j]``, a function tool not named ``reserved``."""
    if not isinstance(tool, dict) or tool.get("type") != "function":
        kind = tool.get("type") if isinstance(tool, dict) else None
        raise UnsupportedParameter(f"tools[{j}].type", dep.id, f"tool type '{kind}' is not supported")
    fn = tool.get("function") or {}
    name = fn.get("name")
    if not name:
        raise InvalidRequest(f"'tools[{j}].function.name' is required.", param=f"tools[{j}].function.name")
    if name == reserved:
        raise UnsupportedParameter(f"tools[{j}].function.name", dep.id, f"'{reserved}' is reserved by the gateway")
    return name, fn.get("description") or None, fn.get("parameters") or EMPTY_SCHEMA


def tool_call(call: object, param: str) -> tuple[str, str, dict]:
    """(id, name, arguments) of an assistant message's tool call."""
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not call.get("id") or not fn.get("name"):
        raise InvalidRequest(f"'{param}' needs an id and a function name.", param=param)
    return call["id"], fn["name"], arguments(fn.get("arguments"), param)


def json_output(body: dict, dep: Deployment) -> tuple[dict, str | None] | None:
    """(schema, description) when the caller asks for JSON (``response_format`` json_schema / json_object)."""
    fmt = body.get("response_format") or {}
    kind = fmt.get("type")
    if kind not in ("json_schema", "json_object"):
        return None
    if kind == "json_object":
        return PERMISSIVE_SCHEMA, None
    spec = fmt.get("json_schema") or {}
    schema = spec.get("schema") or PERMISSIVE_SCHEMA
    if schema.get("type", "object") != "object":
        raise UnsupportedParameter("response_format.json_schema.schema", dep.id, "the schema root must be an object")
    return schema, spec.get("description") or None
