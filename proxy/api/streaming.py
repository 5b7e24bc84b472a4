"""Relaying a chat stream to the caller, chunk by chunk.

Order of events (the caller sees bytes only after step 2):

1. open the stream on the first candidate that yields a first chunk
   (failover happens here, before any byte reaches the caller);
2. send headers and the first chunks, then everything each upstream read
   brings, in one write per read (no buffering beyond what arrived together);
   an SSE comment after ``heartbeat_s`` of upstream silence;
3. at the end, the usage chunk (only if the caller asked) and ``[DONE]``.

After step 2 the deployment never changes: an upstream failure ends the
stream with exactly one OpenAI-shaped error event. A caller that goes away
is noticed by ``ClientWatch`` even while we wait on the provider, and the
upstream is closed at once; the pod's drain deadline ends a stream the same
way, with an error event. Whatever happens, usage is settled, estimated from
the relayed text when the provider never reported it.

Backpressure: one upstream read is relayed before the next is taken, and a
write waits while the caller's socket holds more than ``STREAM_BUFFER_BYTES``;
a slow caller therefore stops the upstream reads and TCP pushes back on the
provider (aiohttp's client buffer is bounded too).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Iterable

import aiohttp
import orjson
from aiohttp import web

from pricing.tokens import estimate_tokens
from pricing.usage import TokenUsage
from proxy.api.classify import Classified
from proxy.api.shell import tries
from proxy.api.validate import ChatCall
from proxy.api.watch import ClientWatch
from proxy.cache.entry import StreamCapture
from proxy.errors import ClientGone, Drained, GatewayError, UpstreamError
from proxy.metering import Meter
from proxy.privacy.redact import ChunkRestorer
from proxy.routing.chain import Chain
from proxy.routing.failover import DRAIN, first_answer
from proxy.routing.state import FAILED, NEUTRAL, OK
from proxy.runtime import Runtime
from proxy.snapshot import Deployment
from proxy.upstream.dialects import get_dialect
from proxy.upstream.relay import HEARTBEAT, Timeouts, UpstreamStream, forwarded_headers
from proxy.upstream.sse import DONE

_CLIENT_GONE = (ConnectionResetError, aiohttp.ClientConnectionResetError, ConnectionError)
STREAM_BUFFER_BYTES = 64 * 1024
HEARTBEAT_BYTES = b": keep-alive\n\n"


class Stamp:
    """Adds the gateway's id, created time and alias to each translated chunk (and shows them to ``tap``)."""

    __slots__ = ("head", "tap")

    def __init__(self, request_id: str, created: int, alias: str, tap: StreamCapture | None = None) -> None:
        self.head = {"id": f"chatcmpl-{request_id}", "object": "chat.completion.chunk", "created": created, "model": alias}
        self.tap = tap  # the response cache's capture of what the caller is sent

    def encode(self, chunks: Iterable[dict]) -> bytes:
        head = self.head
        if self.tap is not None:
            chunks = list(chunks)
            self.tap.add(chunks)
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
    request: web.Request, rt: Runtime, call: ChatCall, cands: list[Deployment], chain: Chain,
    meter: Meter, headers: dict[str, str], watch: ClientWatch, privacy: Classified,
    tap: StreamCapture | None = None,
) -> web.StreamResponse:
    assert meter.tab.plan is not None
    upstream, timeouts, plan = rt.upstream, Timeouts.of(chain.alias), meter.tab.plan

    async def attempt(dep: Deployment) -> UpstreamStream:
        dialect = get_dialect(dep.dialect)
        req = dialect.chat_request(
            privacy.body_for(dep, call.body), dep, upstream.secret_for(dep), max_output_tokens=plan.max_output_tokens,
            extra_headers=forwarded_headers(dep, request.headers),
        )
        return await upstream.open_stream(dialect, req, timeouts)

    dep: Deployment | None = None
    status = 500
    try:
        dep, stream, started = await first_answer(cands, chain, tries(rt, meter), attempt, streaming=True)
    except GatewayError as exc:
        meter.settle(exc.status, None)
        raise
    except asyncio.CancelledError:
        meter.settle(499 if watch.fired != DRAIN else 503, None)
        raise
    restorer = ChunkRestorer(privacy.redaction) if privacy.redacts(dep) and privacy.redaction else None
    try:
        status = await _pipe(request, rt, call, chain.alias.name, meter, dep, stream, started, headers, watch,
                             restorer, tap)
    finally:
        stream.close()
        meter.settle(status, dep)
    return request["stream_response"]


async def _pipe(
    request: web.Request, rt: Runtime, call: ChatCall, alias: str, meter: Meter,
    dep: Deployment, stream: UpstreamStream, started: float, headers: dict[str, str], watch: ClientWatch,
    restorer: ChunkRestorer | None = None, tap: StreamCapture | None = None,
) -> int:
    """Relay the opened stream; returns the status to settle with. Reports the attempt's outcome once.

    With a ``restorer`` (the deployment got the redacted body) each read's chunks
    have placeholders restored; what it holds back is flushed before the usage
    tail and before a mid-stream error event.
    """
    assert meter.tab.plan is not None
    state, est_in = rt.routing, meter.tab.plan.est_input_tokens
    ttft = time.monotonic() - started
    resp = web.StreamResponse(
        status=200,
        headers={
            **headers,
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "x-request-id": request["client_request_id"] or meter.tab.request_id,
            "x-fb-request-id": meter.tab.request_id,
            "x-fb-deployment": dep.id,
            "x-fb-attempts": str(meter.tab.attempts + 1),
        },
    )
    request["stream_response"] = resp
    stamp = Stamp(meter.tab.request_id, int(rt.clock()), alias, tap)

    def end(outcome: str, **attempt: Any) -> None:
        meter.attempted(dep, started=started, usage=_usage(stream, est_in), ttft_s=ttft, **attempt)
        state.finish(dep, outcome, state.clock())

    try:
        await resp.prepare(request)
        if request.transport is not None:
            request.transport.set_write_buffer_limits(high=STREAM_BUFFER_BYTES)
        if restorer is None:
            await resp.write(stamp.encode(stream.first))
            async for chunks in stream.chunks():
                await resp.write(HEARTBEAT_BYTES if chunks is HEARTBEAT else stamp.encode(chunks))
        else:
            await resp.write(stamp.encode(restorer.rewrite(stream.first)))
            async for chunks in stream.chunks():
                await resp.write(HEARTBEAT_BYTES if chunks is HEARTBEAT else stamp.encode(restorer.rewrite(chunks)))
    except UpstreamError as exc:
        # Mid-stream: never a second answer. One error event, then the end.
        end(FAILED, error=exc)
        held = stamp.encode(restorer.flush(broken=True)) if restorer is not None else b""
        await _last_write(resp, held + b"data: " + orjson.dumps(exc.to_body()) + b"\n\n", watch)
        return exc.status
    except _CLIENT_GONE:
        stream.close()
        end(NEUTRAL, error=ClientGone("client closed the stream"), status=499)
        return 499
    except asyncio.CancelledError:
        reason = watch.absorb()
        stream.close()  # the provider stops generating now
        if reason != DRAIN:
            end(NEUTRAL, error=ClientGone("client closed the stream"), status=499)
            return 499
        err = GatewayError("The gateway pod shut down before the answer finished.", status=503, code="server_shutting_down")
        end(NEUTRAL, error=Drained("drain deadline"), status=503)
        await _last_write(resp, b"data: " + orjson.dumps(err.to_body()) + b"\n\n", watch)
        return 503
    usage = _usage(stream, est_in)
    meter.attempted(dep, started=started, usage=usage, ttft_s=ttft)
    state.finish(dep, OK, state.clock())
    tail = stamp.encode(restorer.flush()) if restorer is not None else b""
    if call.include_usage:
        tail += stamp.encode([{"choices": [], "usage": usage.to_openai(), "x_farebox": meter.x_farebox(dep)}])
    await _last_write(resp, tail + DONE, watch, eof=True)
    return 200


async def _last_write(resp: web.StreamResponse, data: bytes, watch: ClientWatch, eof: bool = False) -> None:
    """The stream's last bytes: the outcome is already metered, so a caller leaving now changes nothing."""
    try:
        await resp.write(data)
        if eof:
            await resp.write_eof()
    except _CLIENT_GONE:
        pass
    except asyncio.CancelledError:
        watch.absorb()
