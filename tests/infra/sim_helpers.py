"""Helpers shared by the simulator tests (SSE parsing, request bodies, auth headers)."""

from __future__ import annotations

import orjson

OA = {"Authorization": "Bearer sk-test"}
AN = {"x-api-key": "sk-test", "anthropic-version": "2023-06-01"}


def sse(text: str) -> list[tuple[str | None, str]]:
    """Split an SSE body into ``(event, data)`` pairs, in order."""
    out = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        event, data = None, []
        for line in block.split("\n"):
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
        out.append((event, "\n".join(data)))
    return out


def sse_json(text: str) -> list[tuple[str | None, object]]:
    return [(e, d if d == "[DONE]" else orjson.loads(d)) for e, d in sse(text)]


def chat_body(content: str = "Hello there, simulator!", **extra: object) -> dict:
    return {"model": "gpt-sim", "messages": [{"role": "user", "content": content}], **extra}


def msg_body(content: str = "Hello there, simulator!", **extra: object) -> dict:
    return {"model": "claude-sim", "max_tokens": 256, "messages": [{"role": "user", "content": content}], **extra}
