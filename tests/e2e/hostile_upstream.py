"""A provider that lies: a small aiohttp server speaking the OpenAI chat and Anthropic Messages dialects badly.

The case is the last user message's text (``neg``, ``huge``, ``float``, ``string``, ``error200``, ``cut``,
``nousage``, ``bigchunk``, ``ok``), so a test chooses it per request without any header passing through the
gateway. It runs in a thread of its own with its own event loop, so a test in plain (sync) code can use it
beside real gateway processes. It keeps no state but a count of requests per case.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import orjson
from aiohttp import web

from infra.process import free_port

TEXT = "Hello from a hostile upstream. "
BIG = "x" * (5 * 1024 * 1024)  # one 5 MB chunk
BAD_COUNTS = {"neg": -1000, "huge": 2**62, "float": 12.5, "string": "12"}
CASES = (*BAD_COUNTS, "error200", "cut", "nousage", "bigchunk", "ok")


def _case(body: dict) -> str:
    messages = body.get("messages") or [{}]
    content = messages[-1].get("content")
    if isinstance(content, list):  # Anthropic content blocks
        content = "".join(block.get("text") or "" for block in content if isinstance(block, dict))
    return content if isinstance(content, str) and content in CASES else "ok"


def _prompt_count(case: str) -> object:
    return BAD_COUNTS.get(case, 21)


def _text(case: str) -> str:
    return BIG if case == "bigchunk" else TEXT


# --- OpenAI chat ----------------------------------------------------------------------------------------------


def _openai_usage(case: str) -> dict:
    prompt = _prompt_count(case)
    usage: dict = {"prompt_tokens": prompt, "completion_tokens": 7}
    if type(prompt) is int and prompt >= 0:
        usage["total_tokens"] = prompt + 7
    return usage


async def _openai(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    case = _case(body)
    request.app[COUNTS][f"openai/{case}"] += 1
    if not body.get("stream"):
        if case == "error200":
            return web.json_response({"error": {"message": "The server had an error.", "type": "server_error",
                                                "param": None, "code": None}})
        if case == "cut":
            return await _cut(request, b'{"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"ind')
        answer = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "hostile",
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": _text(case)},
                               "finish_reason": "stop"}]}
        if case != "nousage":
            answer["usage"] = _openai_usage(case)
        return web.Response(body=orjson.dumps(answer), content_type="application/json")
    resp = await _sse(request)
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "hostile"}

    async def send(obj: dict) -> None:
        await resp.write(b"data: " + orjson.dumps({**head, **obj}) + b"\n\n")

    await send({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]})
    for piece in (_text(case), "more text. "):
        await send({"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]})
    if case == "cut":
        return await _drop(request, resp)
    if case == "error200":  # an error as the stream's final event
        await resp.write(b'data: {"error": {"message": "The server had an error while processing your request.", '
                         b'"type": "server_error", "param": null, "code": null}}\n\n')
        await resp.write_eof()
        return resp
    await send({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    if case != "nousage":
        await send({"choices": [], "usage": _openai_usage(case)})
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


# --- Anthropic Messages ---------------------------------------------------------------------------------------


def _anthropic_usage(case: str, output: int = 7) -> dict:
    return {"input_tokens": _prompt_count(case), "output_tokens": output}


async def _anthropic(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    case = _case(body)
    request.app[COUNTS][f"anthropic/{case}"] += 1
    if not body.get("stream"):
        if case == "error200":
            return web.json_response({"type": "error", "error": {"type": "api_error", "message": "Internal error"}})
        if case == "cut":
            return await _cut(request, b'{"id": "msg_1", "type": "message", "content": [{"type": "te')
        answer = {"id": "msg_1", "type": "message", "role": "assistant", "model": "hostile",
                  "content": [{"type": "text", "text": _text(case)}], "stop_reason": "end_turn",
                  "stop_sequence": None}
        if case != "nousage":
            answer["usage"] = _anthropic_usage(case)
        return web.Response(body=orjson.dumps(answer), content_type="application/json")
    resp = await _sse(request)

    async def send(kind: str, obj: dict) -> None:
        await resp.write(b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **obj}) + b"\n\n")

    start: dict = {"id": "msg_1", "type": "message", "role": "assistant", "model": "hostile", "content": [],
                   "stop_reason": None, "stop_sequence": None}
    if case != "nousage":
        start["usage"] = _anthropic_usage(case, output=1)
    await send("message_start", {"message": start})
    await send("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
    for piece in (_text(case), "more text. "):
        await send("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": piece}})
    if case == "cut":
        return await _drop(request, resp)
    if case == "error200":
        await send("error", {"error": {"type": "overloaded_error", "message": "Overloaded"}})
        await resp.write_eof()
        return resp
    await send("content_block_stop", {"index": 0})
    delta: dict = {"delta": {"stop_reason": "end_turn", "stop_sequence": None}}
    if case != "nousage":
        delta["usage"] = {"output_tokens": 7 if case not in BAD_COUNTS else BAD_COUNTS[case]}
    await send("message_delta", delta)
    await send("message_stop", {})
    await resp.write_eof()
    return resp


# --- shared ---------------------------------------------------------------------------------------------------


async def _sse(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    return resp


async def _cut(request: web.Request, partial: bytes) -> web.StreamResponse:
    """A body that stops half-way: the headers promise more than is sent, then the connection drops."""
    resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json",
                                                   "Content-Length": str(len(partial) + 100)})
    await resp.prepare(request)
    await resp.write(partial)
    return await _drop(request, resp)


async def _drop(request: web.Request, resp: web.StreamResponse) -> web.StreamResponse:
    await asyncio.sleep(0.05)
    if request.transport is not None:
        request.transport.abort()
    return resp


COUNTS = web.AppKey("counts", Counter)


def create_app() -> web.Application:
    app = web.Application(client_max_size=1024**2)
    app[COUNTS] = Counter()
    app.router.add_post("/openai/v1/chat/completions", _openai)
    app.router.add_post("/anthropic/v1/messages", _anthropic)
    return app


@contextmanager
def hostile_upstream() -> Iterator[tuple[str, Counter]]:
    """(base URL, requests seen per dialect/case) of a hostile upstream served from a thread until exit."""
    port = free_port()
    loop = asyncio.new_event_loop()
    app = create_app()
    runner = web.AppRunner(app, handle_signals=False)
    ready = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        ready.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())
        loop.close()

    thread = threading.Thread(target=serve, name="hostile-upstream", daemon=True)
    thread.start()
    assert ready.wait(10), "hostile upstream did not start"
    try:
        yield f"http://127.0.0.1:{port}", app[COUNTS]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
