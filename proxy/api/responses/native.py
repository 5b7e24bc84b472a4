"""The Responses surface's answers when the deployment serves the Responses API itself: the provider's own.

A passed-through request (``proxy.upstream.responses_native``) is answered with the provider's response object
(its output items as sent: reasoning with its encrypted content, messages, function calls, built-in tool calls),
only ``id`` (the gateway's), ``model`` (the alias), ``previous_response_id`` and ``store`` (as the client asked
farebox), ``usage`` (the settled counts) and ``x_farebox`` being the gateway's. ``render`` does it for a body,
``NativeEncoder`` for a stream: every event as it came but the response objects in ``response.created`` /
``response.in_progress`` (rewritten the same way), and ``response.completed`` (or ``.incomplete``), held and
written once the request is settled, with the settled usage; with ``keep`` (``store``) the final response is
handed to the store before that last event goes out. Sequence numbers are the encoder's own (consecutive from 0). When the
provider saw the privacy policy's placeholders, text and argument deltas are restored as they stream (a
``StreamRestorer`` per output, what it holds released as one more delta before the output's ``.done``), and so
are the ``.done`` events, the items and the final response (never a reasoning item). ``native_input`` is what
the provider gets as ``input``. Pure.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Iterable

import orjson

from ledger.usage import TokenUsage
from proxy.api.responses.response import usage_of
from proxy.errors import GatewayError
from proxy.privacy.redact import Redaction, StreamRestorer
from proxy.upstream.responses_native import FINISHED, ResponsesEvents, restored_item, restored_response

_DELTAS = {"response.output_text.delta": ("response.output_text.done", "text", False),
           "response.function_call_arguments.delta": ("response.function_call_arguments.done", "arguments", True)}
_DONE = {done: (delta, field, as_json) for delta, (done, field, as_json) in _DELTAS.items()}


def native_input(body: dict[str, Any], earlier: list[dict[str, Any]]) -> Any:
    """The provider's ``input``: the continued conversation (input messages without the ids farebox gave them),
    then the client's own input as written."""
    if not earlier:
        return body.get("input")
    own = body.get("input")
    own = [{"role": "user", "content": own}] if isinstance(own, str) else list(own or ())
    kept = [{k: v for k, v in item.items() if k != "id"}
            if item.get("type", "message") == "message" and item.get("role") != "assistant" else item
            for item in earlier]
    return [*kept, *own]


def _ours(response: Any, body: dict[str, Any], response_id: str, alias: str) -> dict[str, Any]:
    out = dict(response) if isinstance(response, dict) else {}
    out.update(id=response_id, model=alias, previous_response_id=body.get("previous_response_id"),
               store=body.get("store", True) is not False)
    return out


def render(data: dict[str, Any], usage: TokenUsage, body: dict[str, Any], response_id: str, alias: str,
           x_farebox: dict[str, Any]) -> dict[str, Any]:
    return {**_ours(data, body, response_id, alias), "usage": usage_of(usage), "x_farebox": x_farebox}


class NativeEncoder:
    """The provider's Responses events out as they came in (see the module docstring); one per stream."""

    heartbeat = b": keep-alive\n\n"

    def __init__(self, source: ResponsesEvents, body: dict[str, Any], response_id: str, alias: str, tap: Any = None,
                 keep: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
                 redaction: Redaction | None = None) -> None:
        self.source, self.body, self.response_id, self.alias, self.tap = source, body, response_id, alias, tap
        self.keep = keep
        self.redaction = redaction
        self.restorers: dict[tuple[Any, Any], StreamRestorer] = {}  # (output index, content index) -> restorer
        self.finished: dict[str, Any] | None = None  # the provider's response.completed / .incomplete, held
        self.final: dict[str, Any] | None = None
        self.seq = 0

    def _write(self, kind: str, data: dict[str, Any]) -> bytes:
        data["sequence_number"] = self.seq
        self.seq += 1
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"

    def _restored(self, kind: str, data: dict[str, Any]) -> bytes:
        """One event with the placeholders in it restored (see the module docstring)."""
        assert self.redaction is not None
        key = (data.get("output_index"), data.get("content_index"))
        if kind in _DELTAS and isinstance(data.get("delta"), str):
            _, _, as_json = _DELTAS[kind]
            restorer = self.restorers.setdefault(key, StreamRestorer(self.redaction, as_json))
            data["delta"] = restorer.feed(data["delta"])
            return self._write(kind, data)
        head = b""
        if kind in _DONE:
            delta, field, as_json = _DONE[kind]
            held = self.restorers.pop(key, None)
            tail = held.flush() if held is not None else ""
            if tail:
                head = self._write(delta, {"type": delta, **{k: v for k, v in data.items()
                                                             if k in ("item_id", "output_index", "content_index")},
                                           "delta": tail})
            if isinstance(data.get(field), str):
                data[field] = self.redaction.restore(data[field], as_json)
        if isinstance(data.get("part"), dict) and isinstance(data["part"].get("text"), str):
            data["part"] = {**data["part"], "text": self.redaction.restore(data["part"]["text"])}
        if isinstance(data.get("item"), dict):
            data["item"] = restored_item(data["item"], self.redaction.restore)
        return head + self._write(kind, data)

    def encode(self, chunks: Iterable[dict[str, Any]]) -> bytes:
        if self.tap is not None:  # the response cache keeps the chat-shaped answer, as for any surface
            self.tap.add(list(chunks))
        out = []
        for event in self.source.take():
            try:
                data = orjson.loads(event.data)
            except orjson.JSONDecodeError:
                continue
            kind = data.get("type") or event.event or ""
            if kind in FINISHED:
                self.finished = data
                continue
            if isinstance(data.get("response"), dict):
                data["response"] = _ours(data["response"], self.body, self.response_id, self.alias)
            out.append(self._write(kind, data) if self.redaction is None else self._restored(kind, data))
        return b"".join(out)

    def tail(self, usage: TokenUsage, x_farebox: dict[str, Any], include_usage: bool) -> bytes:
        head = self.encode(())
        finished = self.finished or {"type": "response.completed", "response": {"status": "completed", "output": []}}
        response = finished.get("response") if isinstance(finished.get("response"), dict) else {}
        if self.redaction is not None:
            response = restored_response(response, self.redaction.restore)
        final = {**_ours(response, self.body, self.response_id, self.alias),
                 "usage": usage_of(usage), "x_farebox": x_farebox}
        self.final = final
        kind = finished.get("type") if finished.get("type") in FINISHED else "response.completed"
        return head + self._write(kind, {"type": kind, "sequence_number": self.seq, "response": final})

    def error(self, exc: GatewayError) -> bytes:
        failed = _ours({"status": "failed", "output": [], "error": {"code": exc.code or "server_error",
                                                                    "message": exc.message}},
                       self.body, self.response_id, self.alias)
        head = self.encode(())
        self.restorers.clear()  # what a cut stream still holds (perhaps half a placeholder) is dropped
        return head + self._write("response.failed", {"type": "response.failed", "sequence_number": self.seq,
                                                      "response": failed})

    async def settled(self) -> None:
        if self.keep is not None and self.final is not None:
            await self.keep(self.final)
