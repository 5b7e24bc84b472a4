"""The Responses surface's answers when the deployment serves the Responses API itself: the provider's own.

A passed-through request (``proxy.upstream.responses_native``) is answered with the provider's response object
(its output items as sent: reasoning with its encrypted content, messages, function calls, built-in tool calls),
only ``id`` (the gateway's), ``model`` (the alias), ``previous_response_id`` and ``store`` (as the client asked
farebox), ``usage`` (the settled counts) and ``x_farebox`` being the gateway's. ``render`` does it for a body,
``NativeEncoder`` for a stream: every event as it came but the response objects in ``response.created`` /
``response.in_progress`` (rewritten the same way), and ``response.completed`` (or ``.incomplete``), held and
written once the request is settled, with the settled usage; with ``keep`` (``store``) the final response is
kept before that last event goes out. ``native_input`` is what the provider gets as ``input``. Pure.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Iterable

import orjson

from ledger.usage import TokenUsage
from proxy.api.responses.response import usage_of
from proxy.errors import GatewayError
from proxy.upstream.responses_native import FINISHED, ResponsesEvents


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
                 keep: Callable[[dict[str, Any]], Awaitable[None]] | None = None) -> None:
        self.source, self.body, self.response_id, self.alias, self.tap = source, body, response_id, alias, tap
        self.keep = keep
        self.finished: dict[str, Any] | None = None  # the provider's response.completed / .incomplete, held
        self.final: dict[str, Any] | None = None
        self.seq = 0

    def _write(self, kind: str, data: dict[str, Any]) -> bytes:
        self.seq = max(self.seq, int(data.get("sequence_number") or 0) + 1)
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"

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
            out.append(self._write(kind, data))
        return b"".join(out)

    def tail(self, usage: TokenUsage, x_farebox: dict[str, Any], include_usage: bool) -> bytes:
        head = self.encode(())
        finished = self.finished or {"type": "response.completed", "response": {"status": "completed", "output": []}}
        final = {**_ours(finished.get("response"), self.body, self.response_id, self.alias),
                 "usage": usage_of(usage), "x_farebox": x_farebox}
        self.final = final
        kind = finished.get("type") if finished.get("type") in FINISHED else "response.completed"
        return head + self._write(kind, {"type": kind, "sequence_number": self.seq, "response": final})

    def error(self, exc: GatewayError) -> bytes:
        failed = _ours({"status": "failed", "output": [], "error": {"code": exc.code or "server_error",
                                                                    "message": exc.message}},
                       self.body, self.response_id, self.alias)
        head = self.encode(())
        return head + self._write("response.failed", {"type": "response.failed", "sequence_number": self.seq,
                                                      "response": failed})

    async def settled(self) -> None:
        if self.keep is not None and self.final is not None:
            await self.keep(self.final)
