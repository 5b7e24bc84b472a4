"""Helpers for the dialect tests: recorded wire fixtures, deployments, chunk assembly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from proxy.snapshot import Deployment
from proxy.upstream.base import SSEEvent
from proxy.upstream.dialects import get_dialect
from proxy.upstream.sse import SSEParser

FIXTURES = Path(__file__).parent / "fixtures"
ALL_CAPS = frozenset({"tools", "json_schema", "json_object", "vision", "streaming"})
BASE_URLS = {"openai": "https://api.openai.test/v1", "anthropic": "https://api.anthropic.test",
             "azure_openai": "https://res-1.openai.azure.test", "bedrock_converse": "https://bedrock-runtime.eu-west-1.amazonaws.com",
             "gemini": "https://generativelanguage.googleapis.test/v1beta"}
DIALECT_FIELDS = {"azure_openai": {"api_version": "2024-10-21"}, "bedrock_converse": {"auth": "aws_sigv4"}}


def wire(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def body(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text("utf-8"))


def deployment(dialect: str, caps: Iterable[str] = ALL_CAPS, **kw) -> Deployment:
    fields = dict(
        id=f"{dialect}-dep", dialect=dialect, base_url=BASE_URLS[dialect], provider=dialect,
        account="acct-1", region="eu", model="pinned-model-1", context_window=128_000,
        capabilities=frozenset(caps), data_classes=("public", "internal"), **DIALECT_FIELDS.get(dialect, {}),
    )
    fields.update(kw)
    return Deployment(**fields)


def stream(dialect: str, kind: str) -> bytes:
    """A recorded stream's body: ``{dialect}_{kind}.sse``, or for event-stream framed providers the events of
    ``{dialect}_{kind}.events.json`` framed as the provider frames them (decoded by botocore's parser)."""
    framed = FIXTURES / f"{dialect}_{kind}.events.json"
    if not framed.exists():
        return wire(f"{dialect}_{kind}.sse")
    from infra.simulator.aws_auth import event, exception

    out = b""
    for item in json.loads(framed.read_text("utf-8")):
        payload = json.dumps(item["payload"], ensure_ascii=False).encode()
        out += exception(item["exception"], payload) if "exception" in item else event(item["event"], payload)
    return out


def events(raw: bytes, cuts: Iterable[int] = (), dialect: str | None = None) -> list[SSEEvent]:
    """Parse ``raw`` (with the dialect's framing; SSE by default) fed in pieces cut at the given offsets."""
    parser = get_dialect(dialect).stream_parser() if dialect else SSEParser()
    out, start = [], 0
    for cut in sorted(set(cuts)):
        out += parser.feed(raw[start:cut])
        start = cut
    out += parser.feed(raw[start:])
    return out + parser.close()


def translate(dialect: str, raw: bytes, cuts: Iterable[int] = ()):
    """(chunks, translator) for a whole recorded stream; in-stream errors propagate."""
    translator = get_dialect(dialect).stream_translator()
    chunks: list[dict] = []
    for event in events(raw, cuts, dialect):
        chunks += translator.feed(event)
    return chunks, translator


def assemble(chunks: list[dict]) -> dict:
    """What an OpenAI SDK client reassembles from a chunk sequence."""
    content, role, finish = [], None, None
    calls: dict[int, dict] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            delta = choice["delta"]
            role = delta.get("role", role)
            if delta.get("content"):
                content.append(delta["content"])
            for call in delta.get("tool_calls") or ():
                slot = calls.setdefault(call["index"], {"id": None, "name": None, "arguments": ""})
                if call.get("id"):
                    slot["id"] = call["id"]
                fn = call.get("function") or {}
                if fn.get("name"):
                    slot["name"] = fn["name"]
                slot["arguments"] += fn.get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    return {
        "role": role,
        "content": "".join(content),
        "tool_calls": [calls[i] for i in sorted(calls)],
        "finish_reason": finish,
    }
