"""The simulator application: routes, control endpoints, and a blocking ``run``.

Model endpoints: ``POST /v1/chat/completions``, ``POST /v1/embeddings``
(OpenAI), ``POST /v1/responses`` (OpenAI Responses) and ``POST /v1/messages`` (Anthropic), and their token
counters ``POST /v1/responses/input_tokens`` and ``POST /v1/messages/count_tokens``; Azure OpenAI
(``/openai/deployments/{d}/chat/completions``, ``/openai/v1/chat/completions``), Bedrock
(``/model/{id}/converse``, ``…/converse-stream``, SigV4-checked), Gemini (``/v1beta/models/{m}:generateContent``,
``:streamGenerateContent``), the batch APIs (OpenAI's Files and Batches, Anthropic's Message Batches:
``infra.simulator.batches``) and Vertex AI (``/v1/projects/{p}/locations/{l}/publishers/google/models/…``, with
its OAuth ``POST /token``). Provider invoice:
``GET /v1/usage/export?account=A&date=YYYY-MM-DD[&format=csv]`` (both filters
optional). Test control: ``GET /_sim/health``, ``GET /_sim/stats``,
``GET|POST /_sim/models/{model}`` (read / overlay a profile),
``GET|POST /_sim/accounts/{account}`` (read / overlay the account's export
drift, see ``export_drift``), ``GET /_sim/requests?n=10`` (the last n request
bodies received, oldest first; see ``received``), ``POST /_sim/reset`` (drops
runtime profile changes, export drift, stats, billing and received bodies;
restarts the fault RNG).
"""

from __future__ import annotations

import asyncio
import re
import signal
import sys

import orjson
from aiohttp import web

from infra.simulator.batches import add_routes as add_batch_routes
from infra.simulator.config import ConfigError, SimulatorConfig
from infra.simulator.export_drift import apply_drift
from infra.simulator.google_token import token
from infra.simulator.handlers import (
    handle_anthropic_messages,
    handle_azure_chat,
    handle_bedrock_converse,
    handle_embeddings,
    handle_gemini,
    handle_messages_count_tokens,
    handle_openai_chat,
    handle_openai_responses,
    handle_responses_input_tokens,
)
from infra.simulator.received import parse_n
from infra.simulator.state import STATE, SimState

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _json(data: object, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(data), content_type="application/json")


async def usage_export(request: web.Request) -> web.Response:
    """The provider invoice: per account, UTC day and model, requests and tokens by type."""
    state = request.app[STATE]
    account = request.query.get("account") or None
    date = request.query.get("date") or None
    fmt = request.query.get("format", "json")
    if date is not None and not _DATE.match(date):
        return _json({"error": {"message": "date must be YYYY-MM-DD", "type": "invalid_request_error",
                                "param": "date", "code": None}}, 400)
    if fmt not in ("json", "csv"):
        return _json({"error": {"message": "format must be json or csv", "type": "invalid_request_error",
                                "param": "format", "code": None}}, 400)
    rows = apply_drift(state.billing.export(account, date), state.drifts)
    if fmt == "csv":
        return web.Response(text=state.billing.to_csv(rows), content_type="text/csv")
    return _json({"object": "usage_export", "account": account, "date": date, "data": rows})


async def health(request: web.Request) -> web.Response:
    return _json({"status": "ok"})


async def stats(request: web.Request) -> web.Response:
    return _json(request.app[STATE].stats.to_dict())


async def get_model(request: web.Request) -> web.Response:
    model = request.match_info["model"]
    return _json({"model": model, "profile": request.app[STATE].profile(model).to_dict()})


async def set_model(request: web.Request) -> web.Response:
    """Overlay the JSON body (same fields as a config ``models`` entry) on the model's profile."""
    model = request.match_info["model"]
    try:
        data = orjson.loads(await request.read() or b"{}")
    except orjson.JSONDecodeError:
        return _json({"error": {"message": "body must be JSON", "errors": ["<body>: invalid JSON"]}}, 400)
    try:
        profile = request.app[STATE].set_profile(model, data)
    except ConfigError as exc:
        return _json({"error": {"message": "invalid profile", "errors": exc.errors}}, 400)
    return _json({"model": model, "profile": profile.to_dict()})


def _known_account(request: web.Request) -> str | None:
    account = request.match_info["account"]
    return account if request.app[STATE].has_account(account) else None


def _no_account(request: web.Request) -> web.Response:
    return _json({"error": {"message": f"no account {request.match_info['account']!r}",
                            "type": "not_found_error", "param": "account", "code": None}}, 404)


async def get_account(request: web.Request) -> web.Response:
    account = _known_account(request)
    if account is None:
        return _no_account(request)
    return _json({"account": account, "drift": request.app[STATE].drift(account).to_dict()})


async def set_account(request: web.Request) -> web.Response:
    """Overlay the JSON body (``export_factor``, ``extra_token_type``, ...) on the account's export drift."""
    account = _known_account(request)
    if account is None:
        return _no_account(request)
    try:
        data = orjson.loads(await request.read() or b"{}")
    except orjson.JSONDecodeError:
        return _json({"error": {"message": "body must be JSON", "errors": ["<body>: invalid JSON"]}}, 400)
    try:
        drift = request.app[STATE].set_drift(account, data)
    except ConfigError as exc:
        return _json({"error": {"message": "invalid drift", "errors": exc.errors}}, 400)
    return _json({"account": account, "drift": drift.to_dict()})


async def received(request: web.Request) -> web.Response:
    log = request.app[STATE].received
    try:
        n = parse_n(request.query.get("n"), log.capacity)
    except ValueError as exc:
        return _json({"error": {"message": str(exc), "type": "invalid_request_error", "param": "n", "code": None}}, 400)
    return _json({"object": "list", "data": log.last(n)})


async def reset(request: web.Request) -> web.Response:
    request.app[STATE].reset()
    return _json({"status": "reset"})


async def _close_billing(app: web.Application) -> None:
    app[STATE].billing.close()


def create_app(config: SimulatorConfig) -> web.Application:
    """An aiohttp application serving both dialects with ``config``'s behaviour."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[STATE] = SimState(config)
    app.router.add_post("/v1/chat/completions", handle_openai_chat)
    app.router.add_post("/v1/embeddings", handle_embeddings)
    app.router.add_post("/v1/messages", handle_anthropic_messages)
    app.router.add_post("/v1/responses", handle_openai_responses)
    app.router.add_post("/v1/responses/input_tokens", handle_responses_input_tokens)
    app.router.add_post("/v1/messages/count_tokens", handle_messages_count_tokens)
    app.router.add_post("/openai/deployments/{deployment}/chat/completions", handle_azure_chat)
    app.router.add_post("/openai/v1/chat/completions", handle_azure_chat)
    app.router.add_post("/model/{model:.+}/converse", handle_bedrock_converse)
    app.router.add_post("/model/{model:.+}/converse-stream", handle_bedrock_converse)
    app.router.add_post("/v1beta/models/{target:[^/]+}", handle_gemini)
    app.router.add_post("/v1/projects/{project}/locations/{location}/publishers/google/models/{target:[^/]+}",
                        handle_gemini)
    app.router.add_post("/token", token)
    add_batch_routes(app)
    app.router.add_get("/v1/usage/export", usage_export)
    app.router.add_get("/_sim/health", health)
    app.router.add_get("/_sim/stats", stats)
    app.router.add_get("/_sim/models/{model:.+}", get_model)
    app.router.add_post("/_sim/models/{model:.+}", set_model)
    app.router.add_get("/_sim/accounts/{account}", get_account)
    app.router.add_post("/_sim/accounts/{account}", set_account)
    app.router.add_get("/_sim/requests", received)
    app.router.add_post("/_sim/reset", reset)
    app.on_cleanup.append(_close_billing)
    return app


async def start(config: SimulatorConfig, host: str = "127.0.0.1", port: int = 9090) -> tuple[web.AppRunner, int]:
    """Start serving in the running loop; returns the runner and the bound port (``port=0`` picks one).

    The runner cancels a handler when its client disconnects, so client closes
    are seen at once.
    """
    runner = web.AppRunner(create_app(config), handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024)
    await site.start()
    bound = runner.addresses[0][1] if runner.addresses else port
    return runner, bound


def run(config: SimulatorConfig, host: str = "127.0.0.1", port: int = 9090) -> None:
    """Serve until SIGINT/SIGTERM; prints ``simulator listening on http://host:port`` when ready."""

    async def main() -> None:
        runner, bound = await start(config, host, port)
        print(f"simulator listening on http://{host}:{bound}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError):  # pragma: no cover - non-main thread / Windows
                pass
        try:
            await stop.wait()
        finally:
            await runner.cleanup()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:  # pragma: no cover
        sys.exit(130)
