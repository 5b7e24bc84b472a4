"""The Responses surface's answers: a chat answer rendered as a Response object, chat chunks as typed events.

``response_of`` renders the gateway's chat completion (whatever dialect served it) as a ``response`` object:
its ``output`` holds a ``message`` item (``output_text``) and a ``function_call`` item per tool call; ``usage``
counts as the Responses API does (``input_tokens`` with ``input_tokens_details.cached_tokens``,
``output_tokens`` with ``output_tokens_details.reasoning_tokens``). ``ResponsesEncoder`` is the stream relay's
encoder for this surface: ``response.created`` and ``response.in_progress`` first, then per output item
``response.output_item.added``, ``response.content_part.added``, ``response.output_text.delta`` (or
``response.function_call_arguments.delta``) and their ``.done`` events, and once the request is settled
``response.completed`` with the whole response and its usage; ``response.failed`` when it fails. Every event
carries ``sequence_number``. Pure.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Iterable

import orjson

from ledger.usage import TokenUsage
from proxy.errors import GatewayError

INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def usage_of(usage: TokenUsage) -> dict[str, Any]:
    return {"input_tokens": usage.prompt_tokens, "input_tokens_details": {"cached_tokens": usage.cached_input},
            "output_tokens": usage.completion_tokens, "output_tokens_details": {"reasoning_tokens": usage.reasoning},
            "total_tokens": usage.prompt_tokens + usage.completion_tokens}


def shell(body: dict[str, Any], response_id: str, alias: str, created_at: int, status: str) -> dict[str, Any]:
    """The response object without output and usage, echoing what the request asked."""
    text = body.get("text") if isinstance(body.get("text"), dict) else {"format": {"type": "text"}}
    return {"id": response_id, "object": "response", "created_at": created_at, "status": status, "error": None,
            "incomplete_details": None, "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"), "model": alias, "output": [],
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": body.get("previous_response_id"),
            "reasoning": {"effort": (body.get("reasoning") or {}).get("effort"), "summary": None},
            "store": body.get("store", True) is not False, "temperature": body.get("temperature"), "text": text,
            "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [],
            "top_p": body.get("top_p"), "truncation": "disabled", "usage": None, "user": body.get("user"),
            "metadata": body.get("metadata") or {}}


def _finished(out: dict[str, Any], finish: str | None) -> dict[str, Any]:
    if finish in INCOMPLETE:
        out["status"], out["incomplete_details"] = "incomplete", {"reason": INCOMPLETE[finish]}
    else:
        out["status"] = "completed"
    return out


def response_of(completion: dict[str, Any], usage: TokenUsage, body: dict[str, Any], response_id: str, alias: str,
                created_at: int) -> dict[str, Any]:
    """A chat completion body as a Responses ``response`` object."""
    choice = (completion.get("choices") or [{}])[0]
    msg = choice.get("message") or {}
    out = shell(body, response_id, alias, created_at, "completed")
    text = msg.get("content")
    if isinstance(text, str) and text:
        out["output"].append(_message_item(f"msg_{response_id[5:]}", text, "completed"))
    for n, call in enumerate(msg.get("tool_calls") or ()):
        fn = call.get("function") or {}
        out["output"].append({"type": "function_call", "id": f"fc_{response_id[5:]}_{n}", "call_id": call.get("id"),
                              "name": fn.get("name"), "arguments": fn.get("arguments") or "", "status": "completed"})
    out["usage"] = usage_of(usage)
    out["x_farebox"] = completion.get("x_farebox")
    return _finished(out, choice.get("finish_reason"))


def _message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    return {"type": "message", "id": item_id, "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}] if status == "completed" else []}


class ResponsesEncoder:
    """Chat chunks in, Responses stream events out; one per streamed request."""

    heartbeat = b": keep-alive\n\n"

    def __init__(self, body: dict[str, Any], response_id: str, alias: str, created_at: int, tap: Any = None,
                 keep: Callable[[dict[str, Any]], Awaitable[None]] | None = None) -> None:
        self.body, self.response_id, self.alias, self.created_at, self.tap = body, response_id, alias, created_at, tap
        self.keep = keep  # stores the final response (``settled``); None: ``store: false``
        self.final: dict[str, Any] | None = None
        self.seq = 0
        self.started = False
        self.items: list[dict[str, Any]] = []  # output items so far (text kept in "text" until done)
        self.open: int | None = None  # output index of the open item
        self.calls: dict[int, int] = {}  # chat tool_calls index -> output index
        self.finish: str | None = None

    def _event(self, kind: str, data: dict[str, Any]) -> bytes:
        payload = {"type": kind, "sequence_number": self.seq, **data}
        self.seq += 1
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"

    def _shell(self, status: str) -> dict[str, Any]:
        return shell(self.body, self.response_id, self.alias, self.created_at, status)

    def _start(self) -> bytes:
        if self.started:
            return b""
        self.started = True
        return (self._event("response.created", {"response": self._shell("in_progress")})
                + self._event("response.in_progress", {"response": self._shell("in_progress")}))

    def _item_id(self, kind: str) -> str:
        return f"{kind}_{self.response_id[5:]}_{len(self.items)}"

    def _close(self) -> bytes:
        if self.open is None:
            return b""
        at, self.open = self.open, None
        item = self.items[at]
        if item["type"] == "message":
            text = item.pop("text")
            part = {"type": "output_text", "text": text, "annotations": []}
            item.update(status="completed", content=[part])
            return (self._event("response.output_text.done", {"item_id": item["id"], "output_index": at,
                                                              "content_index": 0, "text": text})
                    + self._event("response.content_part.done", {"item_id": item["id"], "output_index": at,
                                                                 "content_index": 0, "part": part})
                    + self._event("response.output_item.done", {"output_index": at, "item": item}))
        item["status"] = "completed"
        return (self._event("response.function_call_arguments.done", {"item_id": item["id"], "output_index": at,
                                                                      "arguments": item["arguments"]})
                + self._event("response.output_item.done", {"output_index": at, "item": item}))

    def encode(self, chunks: Iterable[dict[str, Any]]) -> bytes:
        if self.tap is not None:
            chunks = list(chunks)
            self.tap.add(chunks)
        out = [self._start()]
        for chunk in chunks:
            for choice in chunk.get("choices") or ():
                if choice.get("index", 0) != 0:
                    continue
                out.append(self._delta(choice.get("delta") or {}))
                if choice.get("finish_reason"):
                    self.finish = choice["finish_reason"]
        return b"".join(out)

    def _delta(self, delta: dict[str, Any]) -> bytes:
        out = []
        text = delta.get("content")
        if isinstance(text, str) and text:
            if self.open is None or self.items[self.open]["type"] != "message":
                out.append(self._close())
                item = {"type": "message", "id": self._item_id("msg"), "status": "in_progress", "role": "assistant",
                        "content": [], "text": ""}
                self.items.append(item)
                self.open = len(self.items) - 1
                shown = {k: v for k, v in item.items() if k != "text"}
                out.append(self._event("response.output_item.added", {"output_index": self.open, "item": shown}))
                out.append(self._event("response.content_part.added", {
                    "item_id": item["id"], "output_index": self.open, "content_index": 0,
                    "part": {"type": "output_text", "text": "", "annotations": []}}))
            item = self.items[self.open]
            item["text"] += text
            out.append(self._event("response.output_text.delta", {"item_id": item["id"], "output_index": self.open,
                                                                  "content_index": 0, "delta": text}))
        for call in delta.get("tool_calls") or ():
            at = call.get("index", 0)
            fn = call.get("function") or {}
            if at not in self.calls:
                out.append(self._close())
                item = {"type": "function_call", "id": self._item_id("fc"), "call_id": call.get("id"),
                        "name": fn.get("name"), "arguments": "", "status": "in_progress"}
                self.items.append(item)
                self.open = self.calls[at] = len(self.items) - 1
                out.append(self._event("response.output_item.added", {"output_index": self.open, "item": dict(item)}))
            fragment = fn.get("arguments")
            if isinstance(fragment, str) and fragment and self.calls[at] == self.open:
                item = self.items[self.open]
                item["arguments"] += fragment
                out.append(self._event("response.function_call_arguments.delta", {
                    "item_id": item["id"], "output_index": self.open, "delta": fragment}))
        return b"".join(out)

    def tail(self, usage: TokenUsage, x_farebox: dict[str, Any], include_usage: bool) -> bytes:
        """The settled end: open items done, then ``response.completed`` (or ``.incomplete``) with the usage."""
        head = self._start() + self._close()
        final = self._shell("completed")
        final.update(output=self.items, usage=usage_of(usage), x_farebox=x_farebox)
        _finished(final, self.finish)
        kind = "response.completed" if final["status"] == "completed" else "response.incomplete"
        self.final = final
        return head + self._event(kind, {"response": final})

    def error(self, exc: GatewayError) -> bytes:
        failed = self._shell("failed")
        failed.update(output=self.items, error={"code": exc.code or "server_error", "message": exc.message})
        return self._start() + self._event("response.failed", {"response": failed})

    async def settled(self) -> None:
        if self.keep is not None and self.final is not None:
            await self.keep(self.final)
