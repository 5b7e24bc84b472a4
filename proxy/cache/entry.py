"""A cached answer (``Entry``), built from a finished completion or stream, replayed as either.

One entry serves both shapes: a streamed answer is stored as the completion
its chunks add up to, and a stored completion is replayed to a streaming
caller as chunks (role, content, finish reason per choice). What is never
stored: an answer with tool calls or logprobs, a stream that did not finish
every choice (callers store successful answers only). Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from ledger.usage import TokenUsage

REPLAY_PIECE_CHARS = 256  # a replayed stream's content chunks are at most this long


@dataclass(frozen=True, slots=True)
class Entry:
    """The caller-visible part of an answer, and what it cost when it was fetched."""

    kind: str  # "chat" | "embeddings"
    body: Mapping[str, Any]  # chat: choices (+ system_fingerprint); embeddings: object and data
    usage: TokenUsage
    deployment: str
    cost_micro: int
    currency: str

    def dumps(self) -> bytes:
        return orjson.dumps({"kind": self.kind, "body": self.body, "usage": self.usage.to_dict(),
                             "deployment": self.deployment, "cost_micro": self.cost_micro,
                             "currency": self.currency})

    @classmethod
    def loads(cls, raw: bytes) -> "Entry":
        d = orjson.loads(raw)
        return cls(d["kind"], d["body"], TokenUsage.from_dict(d["usage"]), d["deployment"], int(d["cost_micro"]),
                   d["currency"])


def chat_entry(body: Mapping[str, Any], usage: TokenUsage, deployment: str, cost_micro: int,
               currency: str) -> Entry | None:
    """A finished chat completion's entry; None when it must not be stored (tool calls, no choices)."""
    choices = body.get("choices") or []
    if not choices:
        return None
    for c in choices:
        msg = c.get("message") or {}
        if msg.get("tool_calls") or msg.get("function_call") or c.get("finish_reason") in (None, "tool_calls"):
            return None
    kept = {"choices": choices, **({"system_fingerprint": body["system_fingerprint"]}
                                   if body.get("system_fingerprint") else {})}
    return Entry("chat", kept, usage, deployment, cost_micro, currency)


class StreamCapture:
    """Adds up a chat stream's chunks (as relayed to the caller) into its completion body."""

    __slots__ = ("roles", "texts", "finish", "spoiled")

    def __init__(self) -> None:
        self.roles: dict[int, str] = {}
        self.texts: dict[int, list[str]] = {}
        self.finish: dict[int, str | None] = {}
        self.spoiled = False  # a tool call or a shape we do not replay: not stored

    def add(self, chunks: Iterable[Mapping[str, Any]]) -> None:
        for chunk in chunks:
            for c in chunk.get("choices") or ():
                i = c.get("index", 0)
                delta = c.get("delta") or {}
                if delta.get("tool_calls") or delta.get("function_call") or c.get("logprobs"):
                    self.spoiled = True
                if delta.get("role"):
                    self.roles[i] = delta["role"]
                if delta.get("content"):
                    self.texts.setdefault(i, []).append(delta["content"])
                self.texts.setdefault(i, [])
                if c.get("finish_reason"):
                    self.finish[i] = c["finish_reason"]

    def body(self) -> dict[str, Any] | None:
        """The completion the chunks add up to; None when spoiled or a choice never finished."""
        if self.spoiled or not self.texts or any(self.finish.get(i) is None for i in self.texts):
            return None
        return {"choices": [{"index": i, "message": {"role": self.roles.get(i, "assistant"),
                                                     "content": "".join(self.texts[i])},
                             "finish_reason": self.finish[i], "logprobs": None} for i in sorted(self.texts)]}


def replay_chunks(entry: Entry) -> list[dict[str, Any]]:
    """A chat entry as stream chunks (without the id/created/model head the relay stamps on)."""
    out: list[dict[str, Any]] = []
    for c in entry.body.get("choices") or ():
        i = c.get("index", 0)
        msg = c.get("message") or {}
        out.append({"choices": [{"index": i, "delta": {"role": msg.get("role", "assistant"), "content": ""},
                                 "finish_reason": None}]})
        text = msg.get("content") or ""
        for at in range(0, len(text), REPLAY_PIECE_CHARS):
            out.append({"choices": [{"index": i, "delta": {"content": text[at:at + REPLAY_PIECE_CHARS]},
                                     "finish_reason": None}]})
        out.append({"choices": [{"index": i, "delta": {}, "finish_reason": c.get("finish_reason") or "stop"}]})
    return out
