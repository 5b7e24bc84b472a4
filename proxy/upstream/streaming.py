"""Relaying a chat stream to the caller, chunk by chunk.

Order of events (the caller sees bytes only after step 2):

1. routing opens the stream on the first candidate that yields a first chunk
   (``proxy.routing.answer.first_stream`` runs the attempts ``opener`` makes:
   failover happens there, before any byte reaches the caller);
2. send headers and the first chunks, then everything each upstream read
   brings, in one write per read (no buffering beyond what arrived together);
   an SSE comment after ``heartbeat_s`` of upstream silence;
3. the request is settled and the settlement is durable in the log; only then
   the usage chunk (only if the caller asked) and ``[DONE]``: a caller that saw
   ``[DONE]`` holds an answer the log has settled, whatever happens next.

After step 2 the deployment never changes and this relay is the response's
only writer: any failure (upstream, a malformed event, a bug) ends the stream
with exactly one OpenAI-shaped error event and a clean end of body, never a
second status line. A caller that goes away
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
import logging
import time
from typing import Any, Awaitable, Callable, Iterable, Mapping, Protocol

import aiohttp
import orjson
from aiohttp import web

from ledger.usage import TokenUsage
from pricing.tokens import estimate_tokens
from proxy.errors import ClientGone, Drained, GatewayError, UpstreamError
from proxy.outcomes import DRAIN, FAILED, NEUTRAL, OK
from proxy.snapshot import Deployment
from proxy.upstream.base import Dialect
from proxy.upstream.dialects import get_dialect
from proxy.upstream.relay import HEARTBEAT, Timeouts, UpstreamClient, UpstreamStream, forwarded_headers
from proxy.upstream.sse import DONE
from proxy.upstream.usage_check import estimated_as, needs_estimate, within


class Tap(Protocol):
    """Sees every chunk the caller is sent (``proxy.cache.entry.StreamCapture``, the response cache's capture)."""

    def add(self, chunks: list[dict]) -> None: ...


class Restorer(Protocol):
    """Puts redacted values back into each read's chunks (``proxy.privacy.redact.ChunkRestorer``)."""

    def rewrite(self, chunks: Iterable[dict]) -> list[dict]: ...

    def flush(self, broken: bool = False) -> list[dict]: ...


class Watched(Protocol):
    """The caller's connection, watched (``proxy.api.watch.ClientWatch``): why the task was cancelled."""

    fired: str | None

    def absorb(self) -> str | None: ...


class StreamMeter(Protocol):
    """The request's meter (``proxy.metering.meter.Meter``)."""

    tab: Any

    def attempted(self, dep: Deployment, *, started: float, usage: TokenUsage | None,
                  error: BaseException | None = None, ttft_s: float | None = None, status: int | None = None) -> int: ...

    def x_farebox(self, dep: Deployment) -> dict: ...

    def settle(self, final_status: int, dep: Deployment | None) -> None: ...

    async def durable(self) -> None: ...


Finish = Callable[[Deployment, str], None]  # reports the attempt's outcome to routing (health, breakers)


log = logging.getLogger("farebox.proxy")

_CLIENT_GONE = (ConnectionResetError, aiohttp.ClientConnectionResetError, ConnectionError)
STREAM_BUFFER_BYTES = 64 * 1024
HEARTBEAT_BYTES = b": keep-alive\n\n"


class Encoder(Protocol):
    """How a client surface writes the stream: chat chunks in, that surface's SSE bytes out (``Stamp`` for
    Chat Completions; ``proxy.api.messages.response.MessagesEncoder`` for the Anthropic Messages surface)."""

    heartbeat: bytes  # written after ``heartbeat_s`` of upstream silence

    def encode(self, chunks: Iterable[dict]) -> bytes: ...

    def tail(self, usage: TokenUsage, x_farebox: dict, include_usage: bool) -> bytes:
        """The settled end of a complete stream."""
        ...

    def error(self, exc: GatewayError) -> bytes:
        """The one error event that ends a stream that failed."""
        ...

    async def settled(self) -> None:
        """What the surface keeps of the answer once ``tail`` has built it (the Responses API's stored response),
        written before the stream's last bytes, alongside the settlement's durability."""
        ...


class Stamp:
    """The Chat Completions encoder: adds the gateway's id, created time and alias to each translated chunk
    (and shows them to ``tap``); ends with the usage chunk (when asked) and ``[DONE]``."""

    __slots__ = ("head", "tap")
    heartbeat = HEARTBEAT_BYTES

    def __init__(self, request_id: str, created: int, alias: str, tap: Tap | None = None) -> None:
        self.head = {"id": f"chatcmpl-{request_id}", "object": "chat.completion.chunk", "created": created, "model": alias}
        self.tap = tap  # the response cache's capture of what the caller is sent

    def encode(self, chunks: Iterable[dict]) -> bytes:
        head = self.head
        if self.tap is not None:
            chunks = list(chunks)
            self.tap.add(chunks)
        return b"".join(b"data: " + orjson.dumps({**head, **c}) + b"\n\n" for c in chunks)

    def tail(self, usage: TokenUsage, x_farebox: dict, include_usage: bool) -> bytes:
        usage_chunk = [{"choices": [], "usage": usage.to_openai(), "x_farebox": x_farebox}] if include_usage else []
        return self.encode(usage_chunk) + DONE

    def error(self, exc: GatewayError) -> bytes:
        return b"data: " + orjson.dumps(exc.to_body()) + b"\n\n"

    async def settled(self) -> None:
        return None


def _usage(stream: UpstreamStream, est_input: int, limit: int) -> TokenUsage:
    """Provider usage when complete and within the boundary (``usage_check``); otherwise an estimate from what
    was relayed (marked ``provider_invalid`` with what was received when the provider's usage failed the check)."""
    reported = stream.translator.usage
    if reported is not None:
        reported = within(reported, limit)
    if reported is not None and not needs_estimate(reported):
        if stream.translator.done:
            return reported
        if reported.prompt_tokens:
            return TokenUsage(
                input=reported.input, cached_input=reported.cached_input, cache_write=reported.cache_write,
                cache_write_1h=reported.cache_write_1h, service_tier=reported.service_tier,
                output=max(reported.output, estimate_tokens(len(stream.translator.text_so_far()))),
                source="estimated",
            )
    out = estimate_tokens(len(stream.translator.text_so_far()))
    return estimated_as(reported, input_tokens=est_input, output_tokens=out)


def opener(upstream: UpstreamClient, timeouts: Timeouts, body_for: Callable[[Deployment], dict],
           caller_headers: Mapping[str, str], max_output_tokens: int,
           dialect_for: Callable[[Deployment], Dialect | None] = lambda dep: None,
           ) -> Callable[[Deployment], Awaitable[UpstreamStream]]:
    """The attempt routing's loop runs per candidate: the body that deployment may see, its stream opened
    (``dialect_for``: a passed-through request's own dialect for that deployment; None: its dialect's)."""

    async def attempt(dep: Deployment) -> UpstreamStream:
        dialect: Dialect = dialect_for(dep) or get_dialect(dep.dialect)
        req = dialect.chat_request(body_for(dep), dep, await upstream.credential(dep), max_output_tokens=max_output_tokens,
                                   extra_headers=forwarded_headers(dep, caller_headers))
        return await upstream.open_stream(dialect, req, timeouts, dep)

    return attempt


async def relay(
    request: web.Request, meter: StreamMeter, dep: Deployment, stream: UpstreamStream, started: float, *,
    alias: str, created: int, include_usage: bool, headers: dict[str, str], watch: Watched, finish: Finish,
    restorer: Restorer | None = None, tap: Tap | None = None, encoder: Encoder | None = None,
) -> web.StreamResponse:
    """Relay a stream routing opened; the request is settled before this returns or raises. ``encoder``: the
    client surface's (default: Chat Completions chunks, ``Stamp``)."""
    status = 500
    try:
        status = await _pipe(request, meter, dep, stream, started, alias, created, include_usage, headers, watch,
                             finish, restorer, tap, encoder)
    finally:
        stream.close()
        meter.settle(status, dep)
    return request["stream_response"]


async def _pipe(
    request: web.Request, meter: StreamMeter, dep: Deployment, stream: UpstreamStream, started: float, alias: str,
    created: int, include_usage: bool, headers: dict[str, str], watch: Watched, finish: Finish,
    restorer: Restorer | None, tap: Tap | None, encoder: Encoder | None,
) -> int:
    """Relay the opened stream; returns the status to settle with. Reports the attempt's outcome once.

    With a ``restorer`` (the deployment got the redacted body) each read's chunks
    have placeholders restored; what it holds back is flushed before the usage
    tail and before a mid-stream error event.
    """
    assert meter.tab.plan is not None
    est_in = meter.tab.plan.est_input_tokens
    limit = dep.context_window + meter.tab.plan.max_output_tokens  # no count of one request exceeds it
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
    stamp: Encoder = encoder or Stamp(meter.tab.request_id, created, alias, tap)

    recorded = False  # the attempt's outcome is reported once, whatever fails after

    def end(outcome: str, **attempt: Any) -> TokenUsage:
        nonlocal recorded
        usage = _usage(stream, est_in, limit)
        if not recorded:
            recorded = True
            meter.attempted(dep, started=started, usage=usage, ttft_s=ttft, **attempt)
            finish(dep, outcome)
        return usage

    try:
        return await _relayed(request, resp, meter, dep, stream, stamp, include_usage, watch, restorer, end)
    except Exception as exc:  # a bug or a provider chunk we cannot encode: still one writer, one end
        log.exception("stream relay failed (request %s, deployment %s)", meter.tab.request_id, dep.id)
        err = GatewayError(f"The stream failed inside the gateway; quote request id {meter.tab.request_id}.")
        if not recorded:
            try:
                end(FAILED, error=exc, status=502)
            except Exception:  # noqa: BLE001 - logged above; the settlement still closes the request
                recorded = True
        if resp.prepared:
            await _settled_last_write(meter, dep, 502, resp, stamp.error(err), watch, eof=True)
        return 502


async def _relayed(
    request: web.Request, resp: web.StreamResponse, meter: StreamMeter, dep: Deployment, stream: UpstreamStream,
    stamp: Encoder, include_usage: bool, watch: Watched, restorer: Restorer | None, end: Callable[..., TokenUsage],
) -> int:
    """The relay proper: headers, every read, then the settled tail; each way out writes the stream's end once."""
    try:
        await resp.prepare(request)
        if request.transport is not None:
            request.transport.set_write_buffer_limits(high=STREAM_BUFFER_BYTES)
        if restorer is None:
            await resp.write(stamp.encode(stream.first))
            async for chunks in stream.chunks():
                await resp.write(stamp.heartbeat if chunks is HEARTBEAT else stamp.encode(chunks))
        else:
            await resp.write(stamp.encode(restorer.rewrite(stream.first)))
            async for chunks in stream.chunks():
                await resp.write(stamp.heartbeat if chunks is HEARTBEAT else stamp.encode(restorer.rewrite(chunks)))
    except UpstreamError as exc:
        # Mid-stream: never a second answer. One error event, then the end.
        end(FAILED, error=exc)
        held = stamp.encode(restorer.flush(broken=True)) if restorer is not None else b""
        await _settled_last_write(meter, dep, exc.status, resp, held + stamp.error(exc), watch, eof=True)
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
        await _settled_last_write(meter, dep, 503, resp, stamp.error(err), watch, eof=True)
        return 503
    usage = end(OK)
    tail = stamp.encode(restorer.flush()) if restorer is not None else b""
    # the usage the settlement records: x_farebox's cost is final once the attempt is counted
    tail += stamp.tail(usage, meter.x_farebox(dep), include_usage)
    await _settled_last_write(meter, dep, 200, resp, tail, watch, eof=True, kept=stamp.settled())
    return 200


async def _settled_last_write(meter: StreamMeter, dep: Deployment, status: int, resp: web.StreamResponse, data: bytes,
                              watch: Watched, eof: bool, kept: Awaitable[None] | None = None) -> None:
    """Settle, hand what the surface keeps to its store, wait until the settlement is durable, then write the
    stream's last bytes."""
    meter.settle(status, dep)
    try:
        if kept is not None:
            await kept  # the surface hands what it keeps to its store (written behind: returns at once)
        await meter.durable()
    except asyncio.CancelledError:
        watch.absorb()  # the caller left while we waited: the settlement stands, nothing more to write
        return
    await _last_write(resp, data, watch, eof=eof)


async def _last_write(resp: web.StreamResponse, data: bytes, watch: Watched, eof: bool = False) -> None:
    """The stream's last bytes: the outcome is already metered, so a caller leaving now changes nothing."""
    try:
        await resp.write(data)
        if eof:
            await resp.write_eof()
    except _CLIENT_GONE:
        pass
    except asyncio.CancelledError:
        watch.absorb()
