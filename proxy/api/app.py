"""The aiohttp application: routes, the one gateway middleware, lifecycle.

Auth is on by default: every route needs a virtual key except the explicit
``OPEN_ROUTES`` allow-list and the prefixes a mount declares open. Every failure
leaves as an OpenAI-shaped error.

The model API is this package's; the admin API and the web page are mounted by
the composition root (``mounts``: ``proxy.control.admin``, ``proxy.control.ui``),
so the HTTP app knows nothing of the control plane. ``/admin/`` paths take admin
tokens, never virtual keys.
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
import logging
import re
import secrets as _secrets
import time
from contextlib import contextmanager
from typing import AsyncIterator, Awaitable, Callable, Iterator, Protocol, Sequence

import aiohttp
import orjson
from aiohttp import web

from proxy.admission.auth import authenticate, authenticate_admin
from proxy.admission.auth_throttle import AuthThrottle
from proxy.api import batches, chat, embeddings, files, models, protocol_errors, watch
from proxy.api.canaried import choose_arm, served_arm
from proxy.api.internal import internal_caller
from proxy.api.messages import batches as message_batches
from proxy.api.messages import handler as messages_handler
from proxy.api.messages.response import error_body as messages_error_body
from proxy.api.messages.response import error_status as messages_error_status
from proxy.api.responses import handler as responses_handler
from proxy.api.steps import ARRIVED
from proxy.batches.canary import CANARY_HEADER
from proxy.batches.runner import BATCH_HEADER, TOKEN_HEADER, UNUSED_HEADER
from proxy.errors import AuthenticationFailed, GatewayError, NotFound, PayloadTooLarge, client_headers
from proxy.observe.access_log import ACCESS, INFO, log_access
from proxy.observe.metrics import CONTENT_TYPE_LATEST
from proxy.overload import LoadShedder
from proxy.runtime import RUNTIME, Runtime

log = logging.getLogger("farebox.proxy")
OPEN_ROUTES = frozenset({"/health", "/metrics"})  # /metrics: by alias, deployment, team; its own token when set
MODEL_PREFIX = "/v1/"  # what the in-flight cap and the drain count
MESSAGES_PREFIX = "/v1/messages"  # the Anthropic Messages surface: Anthropic-shaped errors
ADMIN_PREFIX = "/admin/"  # admin tokens, never virtual keys
_CLIENT_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
OPEN_PREFIXES = web.AppKey("open_prefixes", tuple)  # mounted routes that need no virtual key
AUTH_THROTTLE = web.AppKey("auth_throttle", AuthThrottle)  # failed authentications per source address


class Mount(Protocol):
    """Routes added beside the model API by the composition root (the admin API, the web page)."""

    def add_routes(self, app: web.Application) -> None: ...


class Tracer(Protocol):
    """What the app needs of ``proxy.observe.tracing.Tracing`` (imported only when tracing is on)."""

    def install(self, middlewares: list) -> None: ...

    async def echo(self, request: web.Request, response: web.StreamResponse) -> None: ...


def error_response(exc: GatewayError, echo_id: str | None = None, request_id: str | None = None,
                   anthropic: bool = False) -> web.Response:
    """The error in the shape of the surface it came through: OpenAI's, or Anthropic's on the Messages API."""
    headers = client_headers(exc)
    if echo_id:
        headers["x-request-id"] = echo_id
    if request_id:
        headers["x-fb-request-id"] = request_id
        if anthropic:
            headers["request-id"] = request_id
    status, body = (messages_error_status(exc), messages_error_body(exc)) if anthropic else (exc.status, exc.to_body())
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json", headers=headers)


def anthropic_surface(request: web.Request) -> bool:
    """The Anthropic Messages API (its paths, or a model list asked for with ``anthropic-version``)."""
    path = request.path
    return path.startswith(MESSAGES_PREFIX) or (path.startswith("/v1/models") and "anthropic-version" in request.headers)


def _credential(request: web.Request) -> str | None:
    """The bearer token, or an Anthropic client's ``x-api-key`` (a farebox virtual key either way)."""
    auth = request.headers.get("Authorization")
    if auth is None and (api_key := request.headers.get("x-api-key")):
        return f"Bearer {api_key}"
    return auth


_ID_PREFIX = _secrets.token_hex(6)  # per process; the counter makes ids unique within it
_ID_COUNTER = itertools.count(1)


def new_request_id() -> str:
    """Unique across processes (random per-process prefix) without a syscall per request."""
    return f"req_{_ID_PREFIX}{next(_ID_COUNTER):012x}"


def _open(request: web.Request) -> bool:
    """A path under a prefix a mount declared open (``/ui`` and what is under it)."""
    path = request.path
    return any(path == p or path.startswith(p + "/") for p in request.app[OPEN_PREFIXES])


@web.middleware
async def gateway_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """``_gateway``, and the request's access line when the access log is on (``proxy.observe.access_log``);
    while a config canary runs, its figures (``proxy.control.rollout_runner``)."""
    logged = request.path not in OPEN_ROUTES and ACCESS.isEnabledFor(INFO)
    if not logged and request.app[RUNTIME].pod.rollout is None:
        return await _gateway(request, handler)
    started, status = time.monotonic(), 499  # cancelled: the caller left
    try:
        resp = await _gateway(request, handler)
        status = resp.status
        return resp
    finally:
        if logged:
            log_access(request, status, time.monotonic() - started)
        if "rollout_arm" in request:
            served_arm(request, status, time.monotonic() - started)


async def _gateway(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Request id, authentication, and the OpenAI error shape for every failure.

    The internal request id is always generated (event ids derive from it and
    must never collide); a caller's own ``x-request-id`` is echoed back and
    recorded beside it.
    """
    request[ARRIVED] = time.perf_counter()
    rid = new_request_id()
    client_id = request.headers.get("x-request-id")
    if client_id is not None and not _CLIENT_ID.match(client_id):
        client_id = None
    request["request_id"] = rid
    request["client_request_id"] = client_id
    echo = client_id or rid
    anthropic = anthropic_surface(request)
    try:
        if request.path.startswith(ADMIN_PREFIX):
            with _throttled(request):
                request["admin"] = authenticate_admin(request.app[RUNTIME].snapshot,
                                                      request.headers.get("Authorization"))
        elif request.path not in OPEN_ROUTES and not _open(request):
            rt = request.app[RUNTIME]
            with _throttled(request):
                line_token = request.headers.get(TOKEN_HEADER)
                if line_token is None:
                    request["key"] = authenticate(rt.snapshot, _credential(request), rt.clock())
                else:  # the gateway's own: a batch line or a shadow leg (``proxy.api.internal``)
                    request["key"] = internal_caller(rt, request, line_token)
                    rid = echo = request["request_id"]
            if rt.pod.rollout is not None:
                choose_arm(request, rt)
        resp = await handler(request)
    except GatewayError as exc:
        return await _ended(request, exc, anthropic) or error_response(exc, echo, rid, anthropic)
    except web.HTTPRequestEntityTooLarge:
        limit = request.app[RUNTIME].options.max_body_bytes
        return error_response(PayloadTooLarge(f"The request body is larger than the limit of {limit} bytes."), echo, rid,
                              anthropic)
    except web.HTTPNotFound:
        return error_response(NotFound(f"Unknown route {request.method} {request.path}.", code="unknown_url"), echo, rid,
                              anthropic)
    except web.HTTPMethodNotAllowed:
        return error_response(GatewayError(f"Method {request.method} is not allowed on {request.path}.", status=405,
                                           code="method_not_allowed"), echo, rid, anthropic)
    except Exception:  # a bug: log it with the request id, answer in the surface's error shape
        log.exception("unhandled error in %s %s (request %s)", request.method, request.path, rid)
        err = GatewayError(f"Internal error; quote request id {rid}.")
        return await _ended(request, err, anthropic) or error_response(err, echo, rid, anthropic)
    if not resp.prepared:
        resp.headers["x-request-id"] = echo
        resp.headers["x-fb-request-id"] = rid
    return resp


@contextmanager
def _throttled(request: web.Request) -> Iterator[None]:
    """An authentication, refused up front for a source with no failures left; a failure spends one."""
    throttle, source, now = request.app[AUTH_THROTTLE], request.remote or "", time.monotonic()
    throttle.check(source, now)
    try:
        yield
    except AuthenticationFailed:
        throttle.failed(source, now)
        raise


async def _ended(request: web.Request, exc: GatewayError, anthropic: bool = False) -> web.StreamResponse | None:
    """A stream already started has one writer: its end is an error event and a clean end of body, never a
    second status line written into the chunked body. None when no stream was started."""
    resp = request.get("stream_response")
    if resp is None or not resp.prepared:
        return None
    event = (b"event: error\ndata: " + orjson.dumps(messages_error_body(exc)) if anthropic
             else b"data: " + orjson.dumps(exc.to_body()))
    try:
        await resp.write(event + b"\n\n")
        await resp.write_eof()
    except (ConnectionError, RuntimeError, aiohttp.ClientConnectionResetError):  # gone, or already ended
        pass
    return resp


@web.middleware
async def protection_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Pod protection: a fast 503 + Retry-After past the measured admission rate (``proxy.overload``), at the
    in-flight cap, or while the pod is draining. Runs before authentication and body parsing, so a full pod sheds
    load for almost nothing. Counts model requests only (``/v1/``); admin and health pass."""
    if not request.path.startswith(MODEL_PREFIX):
        return await handler(request)
    rt = request.app[RUNTIME]
    cap = rt.options.max_in_flight
    batch_work = TOKEN_HEADER in request.headers and CANARY_HEADER not in request.headers  # lines, shadow legs
    line = batch_work and BATCH_HEADER in request.headers  # a batch line: it waits for a gap in interactive work
    unused = {UNUSED_HEADER: "1"} if line else {}  # turned away here: the line runs again under its id
    if rt.pod.draining:
        return error_response(GatewayError("This gateway pod is shutting down; retry on another.", status=503,
                                           code="server_shutting_down",
                                           headers={"Retry-After": "1", "Connection": "close", **unused}),
                              anthropic=anthropic_surface(request))
    if batch_work and (rt.pod.shedder.busy_for_batch(rt.pod.batch_ceiling(rt.options, line))
                       or (line and not await rt.pod.batch_turn())):
        return error_response(GatewayError("This gateway process is busy; batch work waits.", status=503, code="server_busy",
                                           headers={"Retry-After": "1", "retry-after-ms": "100", **unused}))
    if not rt.pod.shedder.admit():
        rt.metrics.refused_capacity.inc()
        return error_response(GatewayError("This gateway pod is at the request rate it can serve; retry shortly.",
                                           status=503, code="server_overloaded", headers={
                                               "Retry-After": str(rt.pod.shedder.retry_after_s()), **unused}),
                              anthropic=anthropic_surface(request))
    if cap and rt.pod.in_flight >= cap:
        rt.metrics.refused_in_flight.inc()
        return error_response(GatewayError(f"This gateway pod is at its limit of {cap} requests in flight; retry shortly.",
                                           status=503, code="server_overloaded", headers={"Retry-After": "1", **unused}),
                              anthropic=anthropic_surface(request))
    rt.pod.in_flight += 1
    pod = rt.pod
    if not batch_work:
        pod.interactive += 1
        pod.interactive_at = time.monotonic()
    try:
        return await handler(request)
    finally:
        pod.in_flight -= 1
        if not batch_work:
            pod.interactive -= 1
            if pod.interactive == 0:
                pod.interactive_idle.set()
        if rt.pod.in_flight == 0 and rt.pod.draining:
            request.app[DRAINED].set()


DRAINED = web.AppKey("drained", asyncio.Event)
LOAD_SAMPLER = web.AppKey("load_sampler", asyncio.Task)


async def start_load_sampler(app: web.Application) -> None:
    """Feed the pod's shedder every tick: its timer's lateness is the loop lag (``proxy.overload``)."""
    shedder = app[RUNTIME].pod.shedder

    async def sample() -> None:
        tick = shedder.settings.tick_s
        while True:
            due = time.monotonic() + tick
            await asyncio.sleep(tick)
            shedder.tick(time.monotonic() - due)

    app[LOAD_SAMPLER] = asyncio.get_running_loop().create_task(sample(), name="load-sampler")

    async def stop(_: web.Application) -> None:
        app[LOAD_SAMPLER].cancel()

    app.on_cleanup.append(stop)


async def drain(app: web.Application) -> None:
    """On shutdown (SIGTERM): stop taking requests, let streams finish up to the drain deadline, then end them.

    aiohttp has stopped accepting connections before this runs; requests on
    kept-alive connections get a 503 from ``protection_middleware``. Streams
    still open at the deadline end with an error event and are settled
    (``ClientWatch`` fires ``drain``); aiohttp's own shutdown timeout, which
    must be longer, only waits for that.
    """
    rt = app[RUNTIME]
    rt.pod.draining = True
    if rt.pod.in_flight == 0:
        return
    log.info("draining: %d requests in flight, up to %.0fs", rt.pod.in_flight, rt.options.drain_timeout_s)
    try:
        await asyncio.wait_for(app[DRAINED].wait(), rt.options.drain_timeout_s)
        return
    except TimeoutError:
        pass
    log.warning("drain deadline passed: ending %d requests", rt.pod.in_flight)
    rt.pod.drain_expired = True
    try:
        await asyncio.wait_for(app[DRAINED].wait(), 5.0)
    except TimeoutError:
        log.error("%d requests still in flight after the drain deadline", rt.pod.in_flight)


async def health(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    return web.json_response({
        "status": "draining" if rt.pod.draining else "ok", "pod": rt.options.pod_id, "snapshot": rt.snapshot.version,
        "in_flight": rt.pod.in_flight, "routing": rt.routing.summary(rt.routing.clock()),
    })


async def metrics(request: web.Request) -> web.Response:
    """Prometheus text; with ``server.metrics_token_env`` set, only for that bearer token (team names, spend and
    budget limits are in it)."""
    token = request.app[RUNTIME].options.metrics_token
    if token is not None:
        with _throttled(request):
            given = request.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                raise AuthenticationFailed("GET /metrics needs the metrics bearer token.", code="invalid_metrics_token")
    body = request.app[RUNTIME].metrics.render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def create_app(runtime: Runtime, session_factory: Callable[[], aiohttp.ClientSession] | None = None,
               tracing: Tracer | None = None, mounts: Sequence[Mount] = (),
               open_prefixes: Sequence[str] = ()) -> web.Application:
    """The gateway app; with ``tracing`` (``proxy.observe.tracing.Tracing``) its middleware runs inside the gateway's.

    ``mounts`` add their routes after the model API's; ``open_prefixes`` are the paths among them that need no
    virtual key (static files that authenticate with an admin token of their own).
    """
    middlewares: list = [protection_middleware, gateway_middleware]
    traced: list = []
    if tracing is not None:
        tracing.install(traced)
    app = web.Application(middlewares=[*middlewares, *traced, protocol_errors.body_errors],
                          client_max_size=runtime.options.max_body_bytes)
    if tracing is not None:
        app.on_response_prepare.append(tracing.echo)  # the request span's traceparent, back to the caller
    protocol_errors.install(app)  # what the HTTP parser refuses leaves in the OpenAI shape too
    app[RUNTIME] = runtime
    app[OPEN_PREFIXES] = tuple(open_prefixes)
    app[AUTH_THROTTLE] = AuthThrottle(runtime.options.auth_failures_per_minute)
    app[DRAINED] = asyncio.Event()
    app.on_shutdown.append(drain)
    app.on_cleanup.append(watch.stop_watching)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    runtime.metrics.in_flight.set_function(lambda: runtime.pod.in_flight)
    runtime.pod.shedder = LoadShedder(runtime.options.overload)
    runtime.metrics.state.load = runtime.pod.shedder.reading
    app.on_startup.append(start_load_sampler)
    runtime.metrics.track_snapshot(lambda: runtime.snapshot.version)
    runtime.metrics.state.routing = runtime.routing  # breakers and retry budgets, read at scrape time
    app.router.add_post("/v1/chat/completions", chat.chat_completions)
    app.router.add_post("/v1/embeddings", embeddings.create_embeddings)
    app.router.add_post("/v1/messages", messages_handler.create_message)
    app.router.add_post("/v1/messages/count_tokens", messages_handler.count_tokens)
    app.router.add_post("/v1/responses", responses_handler.create_response)
    app.router.add_post("/v1/responses/input_tokens", responses_handler.count_input_tokens)
    app.router.add_get("/v1/responses/{id}", responses_handler.get_response)
    app.router.add_delete("/v1/responses/{id}", responses_handler.delete_response)
    app.router.add_get("/v1/responses/{id}/input_items", responses_handler.list_input_items)
    files.add_routes(app)
    batches.add_routes(app)
    message_batches.add_routes(app)
    app.router.add_get("/v1/models", models.list_models)
    app.router.add_get("/v1/models/{model}", models.get_model)
    for mount in mounts:
        mount.add_routes(app)

    async def upstream_ctx(app: web.Application) -> AsyncIterator[None]:
        session = session_factory() if session_factory else default_session()
        runtime.upstream.open(session)
        yield
        await session.close()

    app.cleanup_ctx.append(upstream_ctx)
    return app


def default_session() -> aiohttp.ClientSession:
    # No pool limit per host: provider concurrency is governed by admission, not by the pool.
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=30, ttl_dns_cache=300)
    return aiohttp.ClientSession(connector=connector, auto_decompress=True, raise_for_status=False)
