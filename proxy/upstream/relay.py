"""Sending one attempt to a provider and reading its answer.

The only place that talks HTTP to providers. aiohttp exceptions become our
``UpstreamError`` classes here; a dialect classifies non-2xx answers. A stream
is opened and read until its first chunk *before* the caller's response is
committed, so failover can still happen; after that, ``UpstreamStream`` is
iterated by the API layer and relayed as it arrives.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable, Mapping, TypeVar

import aiohttp
import orjson
from yarl import URL

from proxy.errors import GatewayError, UpstreamError, UpstreamUnavailable
from proxy.observe.trace_context import TRACE_HEADERS
from proxy.snapshot import Alias, Deployment, Secrets
from proxy.snapshot.secrets import SecretNotDeclared
from proxy.upstream.base import Credential, Dialect, FrameParser, SSEEvent, StreamTranslator, UpstreamRequest
from proxy.upstream.credentials.store import CredentialSources
from proxy.upstream.sse import SSEParser

R = TypeVar("R")
HEARTBEAT = None  # what ``UpstreamStream.chunks`` yields after ``heartbeat_s`` of upstream silence


@dataclass(frozen=True, slots=True)
class Timeouts:
    connect_s: float
    first_token_s: float
    total_s: float
    idle_s: float = 20.0  # between chunks, once streaming
    heartbeat_s: float = 15.0  # silence after which the relay sends an SSE comment

    @classmethod
    def of(cls, alias: Alias) -> "Timeouts":
        return cls(alias.connect_timeout_s, alias.first_token_timeout_s, alias.total_timeout_s,
                   alias.idle_timeout_s, alias.heartbeat_s)


def forwarded_headers(dep: Deployment, incoming: Mapping[str, str]) -> dict[str, str]:
    """Caller headers a deployment is configured to pass on (e.g. simulator controls)."""
    if not dep.forward_headers:
        return {}
    return {k: v for k, v in incoming.items() if k.lower().startswith(dep.forward_headers)}


class UpstreamClient:
    """One pooled HTTP client for all providers; secrets are added per request.

    Built with the pod; its session is opened with the app (``open``) and closed with it.
    """

    session: aiohttp.ClientSession

    def __init__(self, secrets: Secrets, session: aiohttp.ClientSession | None = None) -> None:
        self.secrets = secrets
        self.sources = CredentialSources()
        # told every answer's headers, with the deployment that sent them (the provider-limit mirrors' sync)
        self.on_headers: Callable[[Deployment, Mapping[str, str]], None] | None = None
        if session is not None:
            self.session = session

    def open(self, session: aiohttp.ClientSession) -> None:
        self.session = session

    def secret_for(self, dep: Deployment) -> str | None:
        """The deployment's provider key, only for the host it was declared for; else the attempt fails (never
        sent without it, never sent elsewhere)."""
        try:
            return self.secrets.for_url(dep.secret_ref, dep.base_url)
        except SecretNotDeclared as exc:
            raise UpstreamError(f"Deployment {dep.id} cannot be called: {exc}.",
                                code="provider_secret_not_declared") from None

    async def credential(self, dep: Deployment) -> Credential:
        """What the deployment's dialect authenticates this request with (``secret_for``'s key, a SigV4 signer,
        an OAuth token); tokens and role credentials are refreshed off the event loop."""
        return await self.sources.for_deployment(dep, self.secret_for(dep))

    async def _send(self, dialect: Dialect, req: UpstreamRequest, t: Timeouts,
                    dep: Deployment | None = None) -> aiohttp.ClientResponse:
        timeout = aiohttp.ClientTimeout(total=None, connect=t.connect_s, sock_connect=t.connect_s)
        try:
            traced = TRACE_HEADERS.get()
            headers = req.headers if traced is None else {**req.headers, **traced}
            # The URL goes exactly as the dialect encoded it (a signature covers its path: Bedrock's %3A stays)
            resp = await self.session.request(req.method, URL(req.url, encoded=True), data=req.body, headers=headers,
                                              timeout=timeout)
        except asyncio.TimeoutError:
            raise UpstreamUnavailable("Timed out connecting to the provider.", code="upstream_timeout") from None
        except aiohttp.ClientError as exc:
            raise UpstreamUnavailable(f"Could not reach the provider ({type(exc).__name__}).") from None
        if dep is not None and self.on_headers is not None:
            self.on_headers(dep, resp.headers)
        if resp.status >= 300:
            try:
                body = await resp.read()
            except (aiohttp.ClientError, asyncio.TimeoutError):
                body = b""
            finally:
                resp.release()
            raise dialect.parse_error(resp.status, body, resp.headers)
        return resp

    async def complete(self, dialect: Dialect, req: UpstreamRequest, t: Timeouts,
                       dep: Deployment | None = None) -> dict:
        """A non-streaming call: the provider's JSON answer within the total timeout (``dep``: the deployment
        called, whose answer's headers ``on_headers`` is told)."""
        try:
            async with asyncio.timeout(t.total_s):
                resp = await self._send(dialect, req, t, dep)
                try:
                    raw = await resp.read()
                finally:
                    resp.release()
        except TimeoutError:
            raise UpstreamUnavailable("The provider did not answer in time.", code="upstream_timeout") from None
        except aiohttp.ClientError as exc:
            raise UpstreamUnavailable(f"The provider connection failed ({type(exc).__name__}).") from None
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise UpstreamUnavailable("The provider sent a response that is not JSON.", upstream_status=200) from None
        if not isinstance(data, dict):
            raise UpstreamUnavailable("The provider sent a response that is not a JSON object.", upstream_status=200)
        return data

    async def open_stream(self, dialect: Dialect, req: UpstreamRequest, t: Timeouts,
                          dep: Deployment | None = None) -> "UpstreamStream":
        """Open a stream and read until it yields its first chunk (or ends); ``dep`` as for ``complete``."""
        stream = UpstreamStream(dialect.stream_translator(), time.monotonic() + t.total_s, t.idle_s, t.heartbeat_s,
                                parser=dialect.stream_parser())
        try:
            async with asyncio.timeout(min(t.first_token_s, t.total_s)):
                stream.response = await self._send(dialect, req, t, dep)
                await stream.read_first()
        except TimeoutError:
            stream.close()
            raise UpstreamUnavailable("No first token from the provider in time.", code="first_token_timeout") from None
        except GatewayError:
            stream.close()
            raise
        except (aiohttp.ClientError, ConnectionError) as exc:
            stream.close()
            raise UpstreamUnavailable(f"The provider stream failed ({type(exc).__name__}).") from None
        except BaseException:  # cancelled (caller left, hedge lost, deadline): drop the connection now
            stream.close()
            raise
        return stream


def translated(translator: StreamTranslator, event: SSEEvent) -> list[dict]:
    """``translator.feed(event)``; a translator tripping on a malformed event is an upstream error, never ours."""
    try:
        return translator.feed(event)
    except GatewayError:
        raise
    except Exception as exc:  # a provider's event of the wrong shape (a list where an object belongs, ...)
        raise UpstreamUnavailable(f"The provider sent a stream event farebox cannot read ({type(exc).__name__}).",
                                  upstream_status=200) from None


def parsed(parse: Callable[[dict], R], data: dict) -> R:
    """``parse(data)`` for a provider's 2xx body: an answer of the wrong shape is an upstream error, never ours."""
    try:
        return parse(data)
    except GatewayError:
        raise
    except Exception as exc:
        raise UpstreamUnavailable(f"The provider sent an answer farebox cannot read ({type(exc).__name__}).",
                                  upstream_status=200) from None


@dataclass
class UpstreamStream:
    translator: StreamTranslator
    deadline: float
    idle_s: float = 20.0
    heartbeat_s: float = 15.0
    response: aiohttp.ClientResponse | None = None
    parser: FrameParser = field(default_factory=SSEParser)
    first: list[dict] = field(default_factory=list)
    ended: bool = False
    pending: deque = field(default_factory=deque)  # events read but not translated yet (after the first chunk)

    def _translate(self, first: bool) -> list[dict]:
        """Translate the pending events: all of them, or with ``first`` only up to the first that yields chunks
        (a burst that arrived in one read is not translated whole before its first chunk can be sent)."""
        out: list[dict] = []
        pending = self.pending
        while pending:
            out.extend(translated(self.translator, pending.popleft()))
            if first and out:
                break
        return out

    async def _next_chunks(self, first: bool = False) -> list[dict] | None:
        """Chunks of the events still pending, else of the next read; None once the upstream body ends."""
        assert self.response is not None
        if self.pending:
            return self._translate(first)
        data = await self.response.content.readany()
        if not data:
            events = self.parser.close()
            self.ended = True
        else:
            events = self.parser.feed(data)
        self.pending.extend(events)
        out = self._translate(first)
        if not out and self.ended and not self.pending:
            return None
        return out

    async def read_first(self) -> None:
        while not self.first and (self.pending or not self.ended) and not self.translator.done:
            chunks = await self._next_chunks(first=True)
            if chunks is None:
                break
            self.first = chunks

    async def chunks(self) -> AsyncIterator[list[dict] | None]:
        """The rest of the stream, one list per upstream read, ``HEARTBEAT`` after each ``heartbeat_s``
        of silence; raises UpstreamError mid-stream (total or idle timeout, broken connection, cut short).

        Reading happens only when the caller asks for the next item, so a slow client (whose writes
        wait for the socket to drain) stops the reads here and TCP pushes back on the provider.
        """
        try:
            last_data = time.monotonic()
            while (self.pending or not self.ended) and not self.translator.done:
                now = time.monotonic()
                if now >= self.deadline:
                    raise UpstreamUnavailable("The provider stream exceeded the total timeout.", code="upstream_timeout")
                if now - last_data >= self.idle_s:
                    raise UpstreamUnavailable(
                        f"The provider sent nothing for {self.idle_s:g}s mid-stream.", code="upstream_idle_timeout")
                wait = min(self.deadline - now, last_data + self.idle_s - now, self.heartbeat_s)
                try:
                    # Cancelling a pending read loses nothing: aiohttp keeps unread bytes buffered.
                    async with asyncio.timeout(wait):
                        chunks = await self._next_chunks()
                except TimeoutError:
                    if time.monotonic() - last_data >= self.heartbeat_s and time.monotonic() < self.deadline:
                        yield HEARTBEAT
                    continue
                except (aiohttp.ClientError, ConnectionError) as exc:
                    raise UpstreamUnavailable(f"The provider stream broke off ({type(exc).__name__}).") from None
                last_data = time.monotonic()
                if chunks is None:
                    break
                if chunks:
                    yield chunks
            if not self.translator.done:
                raise UpstreamUnavailable("The provider stream ended without completing.", code="stream_interrupted")
        finally:
            self.close()

    def close(self) -> None:
        """Let the upstream connection go at once (also on client disconnect): back to the pool when the stream
        completed, else closed. A completed stream whose body has not quite ended (the end of a chunked body,
        often its own packet after a provider's last event) is read to its end in the background first: a
        connection released with unread body is closed, and the next request would open a new one (a TCP and
        TLS handshake)."""
        resp = self.response
        if resp is None or resp.closed:
            return
        if not self.translator.done:
            resp.close()
        elif resp.content.at_eof():
            resp.release()
        else:
            try:
                task = asyncio.get_running_loop().create_task(_drained(resp))
            except RuntimeError:  # no loop running: nothing can read it
                resp.close()
                return
            _DRAINING.add(task)
            task.add_done_callback(_DRAINING.discard)


DRAIN_S = 1.0  # how long a completed stream's body may take to end before its connection is dropped
DRAIN_BYTES = 64 * 1024  # how much of it is read; past that the connection is dropped
_DRAINING: set[asyncio.Task] = set()  # the drains under way (a task must be referenced until it ends)


async def _drained(resp: aiohttp.ClientResponse) -> None:
    """Read a completed stream's body to its end, then release its connection to the pool; else close it."""
    read = 0
    try:
        async with asyncio.timeout(DRAIN_S):
            while read <= DRAIN_BYTES and (data := await resp.content.readany()):
                read += len(data)
    except (TimeoutError, aiohttp.ClientError, ConnectionError):
        resp.close()
        return
    if read > DRAIN_BYTES:
        resp.close()
    else:
        resp.release()


__all__ = ["HEARTBEAT", "Timeouts", "UpstreamClient", "UpstreamStream", "UpstreamError", "forwarded_headers", "parsed",
           "translated"]
