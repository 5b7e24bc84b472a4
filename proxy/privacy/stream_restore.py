"""Restoring placeholders in a relayed chat stream, at the level of OpenAI chunk dicts.

The relay translates each upstream read into a list of OpenAI-shaped chunk
dicts before it encodes them as SSE; ``ChunkRestorer.rewrite`` sits between
the two. Each choice's content and each tool call's arguments has its own
``StreamRestorer``.

Invariants:
- The concatenated ``delta.content`` (and each tool call's ``arguments``) the
  caller receives equals ``Redaction.restore`` of what the provider sent.
- Held-back text is emitted no later than the chunk that carries the choice's
  ``finish_reason``; ``flush`` emits whatever a stream that ended without one
  still holds.
"""

from __future__ import annotations

from typing import Any

from proxy.privacy.redact import Redaction, StreamRestorer


class ChunkRestorer:
    def __init__(self, redaction: Redaction) -> None:
        self._redaction = redaction
        self._content: dict[int, StreamRestorer] = {}
        self._args: dict[tuple[int, int], StreamRestorer] = {}

    def _restorer(self, table: dict, key: Any, json_string: bool) -> StreamRestorer:
        r = table.get(key)
        if r is None:
            r = table[key] = StreamRestorer(self._redaction, json_string)
        return r

    def rewrite(self, chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The same chunks, placeholders restored in place and partial placeholders held back."""
        if not len(self._redaction):
            return chunks
        for chunk in chunks:
            for choice in chunk.get("choices") or ():
                self._choice(choice)
        return chunks

    def _choice(self, choice: dict[str, Any]) -> None:
        index = choice.get("index", 0)
        delta = choice.get("delta")
        if delta is None:
            delta = choice["delta"] = {}
        content = delta.get("content")
        if isinstance(content, str):
            delta["content"] = self._restorer(self._content, index, False).feed(content)
        for call in delta.get("tool_calls") or ():
            fn = call.get("function")
            if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                key = (index, call.get("index", 0))
                fn["arguments"] = self._restorer(self._args, key, True).feed(fn["arguments"])
        if choice.get("finish_reason") is not None:
            self._release(index, delta)

    def _release(self, index: int, delta: dict[str, Any]) -> None:
        """Move what choice ``index`` still holds into ``delta`` (the chunk that ends the choice)."""
        held = self._content.pop(index, None)
        if held is not None:
            tail = held.flush()
            if tail:
                delta["content"] = (delta.get("content") or "") + tail
        for key in sorted(k for k in self._args if k[0] == index):
            tail = self._args.pop(key).flush()
            if not tail:
                continue
            calls = delta.setdefault("tool_calls", [])
            same = next((c for c in calls if c.get("index", 0) == key[1]), None)
            if same is None:
                calls.append({"index": key[1], "function": {"arguments": tail}})
            else:
                fn = same.setdefault("function", {})
                fn["arguments"] = (fn.get("arguments") or "") + tail

    def flush(self) -> list[dict[str, Any]]:
        """Chunks carrying whatever is still held (a stream that ended without a finish_reason)."""
        out: list[dict[str, Any]] = []
        for index in sorted({*self._content, *(k[0] for k in self._args)}):
            delta: dict[str, Any] = {}
            self._release(index, delta)
            if delta:
                out.append({"choices": [{"index": index, "delta": delta, "finish_reason": None}]})
        return out
