"""Reversible redaction: found values become placeholders (``<EMAIL_1>``) and come back in the answer.

A ``Redaction`` belongs to one request and lives only in the handler's memory:
it is never logged, stored or put in an event.

Invariants:
- Within a request the same value always gets the same placeholder.
- Only placeholders this request issued are restored. Placeholder-shaped text
  the caller wrote itself (``<EMAIL_1>`` typed literally) is never issued:
  numbering skips every placeholder already present in the request, so a
  literal the model echoes back stays a literal.
- Streams: ``StreamRestorer`` fed any chunking of a text emits exactly
  ``restore(text)``; it holds back only a tail that could still become a
  placeholder (at most ``max_len`` characters).
- ``ChunkRestorer`` works on the OpenAI chunk dicts the relay translates each
  upstream read into (before SSE encoding), one ``StreamRestorer`` per choice's
  content and per tool call's arguments. Held-back text is emitted no later
  than the chunk carrying the choice's ``finish_reason``; ``flush`` emits what
  a stream that ended without one still holds, except, when an error cut the
  stream, the start of an issued placeholder: a cut placeholder never leaks.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from proxy.privacy.scanner import Finding, Path, chat_texts

PLACEHOLDER = re.compile(r"<([A-Z]+)_([0-9]+)>")
_PARTIAL = re.compile(r"<[A-Z]*(?:_[0-9]*)?")  # a prefix a placeholder may still grow from


class Redaction:
    """One request's placeholder map (placeholder -> original value) and how to undo it."""

    def __init__(self, reserved: Iterable[str] = ()) -> None:
        self._by_value: dict[tuple[str, str], str] = {}
        self._values: dict[str, str] = {}
        self._reserved = set(reserved)  # placeholder-shaped text the caller wrote
        self._next: dict[str, int] = {}
        self.max_len = 0

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:  # never the values
        return f"Redaction({len(self._values)} placeholders)"

    def placeholder(self, kind: str, value: str) -> str:
        """The stable placeholder of ``value`` in this request, issuing one on first sight."""
        key = (kind, value)
        issued = self._by_value.get(key)
        if issued is not None:
            return issued
        n = self._next.get(kind, 0)
        while True:
            n += 1
            issued = f"<{kind.upper()}_{n}>"
            if issued not in self._reserved:
                break
        self._next[kind] = n
        self._by_value[key] = issued
        self._values[issued] = value
        self.max_len = max(self.max_len, len(issued))
        return issued

    def redact(self, text: str) -> str:
        """``text`` with every value this request redacted replaced by its placeholder: for the same request in
        another API's shape than the scanned chat body (a natively passed-through request). Longest first."""
        for (_, value), issued in sorted(self._by_value.items(), key=lambda item: -len(item[0][1])):
            if value in text:
                text = text.replace(value, issued)
        return text

    def issued_prefix(self, text: str) -> bool:
        """``text`` is the start of a placeholder this request issued (``<CARD_1`` of ``<CARD_12>``)."""
        return any(placeholder.startswith(text) for placeholder in self._values)

    def restore(self, text: str, json_string: bool = False) -> str:
        """``text`` with every placeholder this request issued replaced by its value.

        ``json_string``: the text sits inside a JSON string (tool-call arguments),
        so values are JSON-escaped.
        """
        if not self._values or "<" not in text:
            return text
        values = self._values

        def back(m: re.Match[str]) -> str:
            value = values.get(m.group(0))
            if value is None:
                return m.group(0)
            return json.dumps(value, ensure_ascii=False)[1:-1] if json_string else value

        return PLACEHOLDER.sub(back, text)


def _get(body: Any, path: Path) -> Any:
    for step in path:
        body = body[step]
    return body


def _set(body: Any, path: Path, value: Any) -> None:
    for step in path[:-1]:
        body = body[step]
    body[path[-1]] = value


def redact_chat(body: Mapping[str, Any], findings: Iterable[Finding]) -> tuple[dict[str, Any], Redaction]:
    """A copy of the chat body with every finding replaced by its placeholder, and the map to undo it.

    The input body is left untouched (the original is what a self-hosted
    deployment, or a failover to one, receives).
    """
    reserved = {m.group(0) for _, text in chat_texts(body) for m in PLACEHOLDER.finditer(text)}
    redaction = Redaction(reserved)
    out = copy.deepcopy(dict(body))
    by_path: dict[Path, list[Finding]] = {}
    for f in findings:
        by_path.setdefault(f.path, []).append(f)
    for path, found in by_path.items():
        text = _get(body, path)
        pieces, last = [], 0
        for f in sorted(found, key=lambda f: f.start):
            pieces.append(text[last:f.start])
            pieces.append(redaction.placeholder(f.kind, text[f.start:f.end]))
            last = f.end
        pieces.append(text[last:])
        _set(out, path, "".join(pieces))
    return out, redaction


def restore_chat_response(body: dict[str, Any], redaction: Redaction) -> dict[str, Any]:
    """Restore message content and tool-call arguments of a non-stream answer, in place; returns it."""
    for choice in body.get("choices") or ():
        msg = choice.get("message") or {}
        content = msg.get("content")
        if isinstance(content, str):
            msg["content"] = redaction.restore(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    part["text"] = redaction.restore(part["text"])
        for call in msg.get("tool_calls") or ():
            fn = call.get("function") or {}
            if isinstance(fn.get("arguments"), str):
                fn["arguments"] = redaction.restore(fn["arguments"], json_string=True)
    return body


class StreamRestorer:
    """Restores one streamed text (a choice's content, or one tool call's arguments) incrementally."""

    __slots__ = ("_redaction", "_json", "_held")

    def __init__(self, redaction: Redaction, json_string: bool = False) -> None:
        self._redaction, self._json, self._held = redaction, json_string, ""

    def feed(self, text: str) -> str:
        """Text safe to emit now; a tail that may still become an issued placeholder is held back."""
        buf = self._held + text
        cut = buf.rfind("<")
        if cut < 0 or len(buf) - cut >= max(self._redaction.max_len, 1) or not _PARTIAL.fullmatch(buf, cut):
            self._held = ""
            return self._redaction.restore(buf, self._json)
        # A placeholder holds exactly one "<": splitting at the last one never cuts a placeholder.
        self._held = buf[cut:]
        return self._redaction.restore(buf[:cut], self._json)

    def flush(self, broken: bool = False) -> str:
        """What is still held, at the end of the text. ``broken``: the text was cut (a mid-stream error), so
        a held start of a placeholder this request issued is dropped: it is our artefact, not the model's."""
        held, self._held = self._held, ""
        if broken and held and self._redaction.issued_prefix(held):
            return ""
        return self._redaction.restore(held, self._json)


class ChunkRestorer:
    """Restores a relayed chat stream chunk by chunk (see the module docstring)."""

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

    def _release(self, index: int, delta: dict[str, Any], broken: bool = False) -> None:
        """Move what choice ``index`` still holds into ``delta`` (the chunk that ends the choice)."""
        held = self._content.pop(index, None)
        if held is not None:
            tail = held.flush(broken)
            if tail:
                delta["content"] = (delta.get("content") or "") + tail
        for key in sorted(k for k in self._args if k[0] == index):
            tail = self._args.pop(key).flush(broken)
            if not tail:
                continue
            calls = delta.setdefault("tool_calls", [])
            same = next((c for c in calls if c.get("index", 0) == key[1]), None)
            if same is None:
                calls.append({"index": key[1], "function": {"arguments": tail}})
            else:
                fn = same.setdefault("function", {})
                fn["arguments"] = (fn.get("arguments") or "") + tail

    def flush(self, broken: bool = False) -> list[dict[str, Any]]:
        """Chunks carrying whatever is still held (a stream that ended without a finish_reason; ``broken``:
        cut by an error, so a half-streamed placeholder is dropped, never relayed)."""
        out: list[dict[str, Any]] = []
        for index in sorted({*self._content, *(k[0] for k in self._args)}):
            delta: dict[str, Any] = {}
            self._release(index, delta, broken)
            if delta:
                out.append({"choices": [{"index": index, "delta": delta, "finish_reason": None}]})
        return out
