"""Checks every dialect makes: does the deployment have the capability a request needs?

Each dialect's ``validate`` calls ``require_capabilities`` and then adds the
parameters its own wire format cannot carry. A request needing something the
deployment lacks is refused naming the parameter, never silently degraded.
"""

from __future__ import annotations

from typing import Iterator

from proxy.errors import InvalidRequest, UnsupportedParameter
from proxy.snapshot import Deployment


def content_parts(body: dict) -> Iterator[tuple[str, dict]]:
    """(param path, part) for every structured content part of every message."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            for j, part in enumerate(content):
                if isinstance(part, dict):
                    yield f"messages[{i}].content[{j}]", part


def response_format_type(body: dict) -> str | None:
    """``json_schema`` / ``json_object`` / ``text`` / None; raises on a malformed value."""
    fmt = body.get("response_format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or not isinstance(fmt.get("type"), str):
        raise InvalidRequest("'response_format' must be an object with a 'type'.", param="response_format")
    return fmt["type"]


def uses_tools(body: dict) -> bool:
    choice = body.get("tool_choice")
    return bool(body.get("tools") or body.get("functions")) or (
        choice is not None and choice != "none"
    )


def require_capabilities(body: dict, deployment: Deployment) -> None:
    """Raise ``UnsupportedParameter`` for the first need the deployment cannot meet."""
    caps = deployment.capabilities
    if body.get("stream") and "streaming" not in caps:
        raise UnsupportedParameter("stream", deployment.id, "streaming is not enabled")
    if uses_tools(body) and "tools" not in caps:
        param = next(p for p in ("tools", "functions", "tool_choice") if body.get(p) is not None)
        raise UnsupportedParameter(param, deployment.id, "tool calling is not supported")
    kind = response_format_type(body)
    if kind == "json_schema" and "json_schema" not in caps:
        raise UnsupportedParameter("response_format", deployment.id, "structured outputs (json_schema) are not supported")
    if kind == "json_object" and not caps & {"json_object", "json_schema"}:
        raise UnsupportedParameter("response_format", deployment.id, "JSON mode is not supported")
    if kind not in (None, "text", "json_schema", "json_object"):
        raise UnsupportedParameter("response_format", deployment.id, f"unknown type '{kind}'")
    if "vision" not in caps:
        for param, part in content_parts(body):
            if part.get("type") == "image_url":
                raise UnsupportedParameter(param, deployment.id, "image input is not supported")


def refuse_untranslatable(body: dict, deployment: Deployment, never: frozenset[str],
                          noop_values: dict[str, tuple], provider: str) -> None:
    """Raise for the first parameter a translating dialect cannot carry: one of ``never`` set to anything, or one
    of ``noop_values`` set to other than its no-op values."""
    for param in sorted(never):
        if body.get(param) is not None:
            raise UnsupportedParameter(param, deployment.id, f"{provider} has no equivalent")
    for param, allowed in noop_values.items():
        value = body.get(param)
        if value is not None and value not in allowed:
            raise UnsupportedParameter(param, deployment.id, f"{provider} has no equivalent")


def reject_unknown(body: dict, known: frozenset[str], deployment: Deployment, what: str) -> None:
    """Raise for the first top-level parameter not in ``known`` (sorted, so the error is stable)."""
    unknown = sorted(set(body) - known)
    if unknown:
        raise UnsupportedParameter(unknown[0], deployment.id, f"not a {what} parameter")
