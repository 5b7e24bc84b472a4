"""Relaying a chat stream to the caller, chunk by chunk.

Order of events (the caller sees bytes only after step 2):

1. open the stream on the first candidate that yields a first chunk
   (failover happens here, before any byte reaches the caller);
2. send headers and the first chunks, then everything each upstream read
   brings, in one write per read (no buffering beyond what arrived together);
3. at the end, the usage chunk (only if the caller asked) and ``[DONE]``.

After step 2 the deployment never changes: an upstream failure ends the
stream with exactly one OpenAI-shaped error event; a caller that goes away
closes the upstream at once. Either way usage is settled, estimated from the
relayed text when the provider never reported it.
"""

from __future__ import annotations

import time
from typing import Iterable

import aiohttp
import orjson
from aiohttp import web

from pricing.tokens import estimate_tokens
from pricing.usage import TokenUsage
from proxy.api.validate import ChatCall
from proxy.control.snapshot import Alias, Deployment
from proxy.errors import GatewayError, UpstreamError
from proxy.metering import ClientGone, Meter
from proxy.routing.failover import first_answer
from proxy.runtime import Runtime
from proxy.upstream.dialects import get_dialect
from proxy.upstream.relay import Timeouts, UpstreamStream, forwarded_headers
from proxy.upstream.sse import DONE

_CLIENT_GONE = (ConnectionResetError, aiohttp.ClientConnectionResetError, ConnectionError)


class Stamp:
    """Adds the gateway's id, created time and alias to each translated chunk."""

    __slots__ = ("head",)

    def __init__(self, request_id: str, created: int, alias: str) -> None:
        self.head = {"id": f"chatcmpl-{request_id}", "object": "chat.completion.chunk", "created": created, "model": alias}

    def encode(self, chunks: Iterable[dict]) -> bytes:
        head = self.head
        return b"".join(b"data: " + orjson.dumps({**head, **c}) + b"\n\n" for c in chunks)


def _usage(stream: UpstreamStream, est_input: int) -> TokenUsage:
    """Provider usage when complete; otherwise an estimate from what was relayed."""
    reported = stream.translator.usage
    if reported is not None and stream.translator.done:
        return reported
    out = estimate_tokens(len(stream.translator.text_so_far()))
    if reported is not None and reported.prompt_tokens:
        return TokenUsage(
            input=reported.input, cached_input=reported.cached_input, cache_write=reported.cache_write,
            output=max(reported.output, out), source="estimated",
        )
    return TokenUsage(input=est_input, output=out, source="estimated")


async def relay(
    request: web.Request, rt: Runtime, call: ChatCall, alias: Alias,
    cands: list[Deployment], meter: Meter, headers: dict[str, str],
) -> web.StreamResponse:
    assert rt.upstream is not None and meter.plan is not None
    upstream, timeouts, plan = rt.upstream, Timeouts.of(alias), meter.plan

    async def attempt(dep: Deployment) -> UpstreamStream:
        dialect = get_dialect(dep.dialect)
        req = dialect.chat_request(
            call.body, dep, upstream.secret_for(dep), max_output_tokens=plan.max_output_tokens,
            extra_headers=forwarded_headers(dep, request.headers),
        )
        return await upstream.open_stream(dialect, req, timeouts)

    dep: Deployment | None = None
    status = 500
    try:
        dep, stream, started = await first_answer(cands, meter, attempt)
    except GatewayError as exc:
        meter.settle(exc.status, None)
        raise
    try:
        status = await _pipe(request, rt, call, alias, meter, dep, stream, started, headers)
    finally:
        stream.close()
        meter.settle(status, dep)
    return request["stream_response"]


async def _pipe(
    request: web.Request, rt: Runtime, call: ChatCall, alias: Alias, meter: Meter,
    dep: Deployment, stream: UpstreamStream, started: float, headers: dict[str, str],
) -> int:
    """Relay the opened stream; returns the status to settle with."""
    assert meter.plan is not None
    ttft = time.monotonic() - started
    resp = web.StreamResponse(
        status=200,
        headers={
            **headers,
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "x-request-id": request["client_request_id"] or meter.request_id,
            "x-fb-request-id": meter.request_id,
            "x-fb-deployment": dep.id,
            "x-fb-attempts": str(meter.attempts + 1),
        },
    )
    request["stream_response"] = resp
    stamp = Stamp(meter.request_id, int(rt.clock()), alias.name)
    try:
        await resp.prepare(request)
        await resp.write(stamp.encode(stream.first))
        async for chunks in stream.chunks():
            await resp.write(stamp.encode(chunks))
    except UpstreamError as exc:
        # Mid-stream: never a second answer. One error event, then the end.
        meter.attempted(dep, started=started, usage=_usage(stream, meter.plan.est_input_tokens), error=exc, ttft_s=ttft)
        try:
            await resp.write(b"data: " + orjson.dumps(exc.to_body()) + b"\n\n")
        except _CLIENT_GONE:
            pass
        return exc.status
    except _CLIENT_GONE:
        stream.close()
        meter.attempted(
            dep, started=started, usage=_usage(stream, meter.plan.est_input_tokens),
            error=ClientGone("client closed the stream"), ttft_s=ttft, status=499,
        )
        return 499
    usage = _usage(stream, meter.plan.est_input_tokens)
    meter.attempted(dep, started=started, usage=usage, ttft_s=ttft)
    tail = b""
    if call.include_usage:
        tail = stamp.encode([{"choices": [], "usage": usage.to_openai(), "x_farebox": meter.x_farebox(dep)}])
    try:
        await resp.write(tail + DONE)
        await resp.write_eof()
    except _CLIENT_GONE:
        pass
    return 200
