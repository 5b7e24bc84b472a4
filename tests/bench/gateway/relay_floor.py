"""The floor the gateway's CPU is read against: a bare aiohttp relay in front of the same simulator.

``python -m tests.bench.gateway.relay_floor --port P --upstream URL`` serves every POST by sending its body
and headers (hop-by-hop ones left out) to ``URL`` + the same path with one pooled ``ClientSession`` and
answering with the upstream's status, content type and bytes: what any Python gateway must do at least
(parse a request, make one upstream call, write the answer), with none of farebox's work (auth, limits,
budgets, routing, events, metering). It runs on uvloop, as the gateway does. ``GET /health`` says it is up.

The bench runs its open loop at the ladder's rates against it after the gateway's (``floor_rows``), so the
gateway's CPU per request is reported beside the floor's, measured in the same sitting.
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import replace
from typing import AsyncIterator, Callable

import aiohttp
from aiohttp import web
from yarl import URL

from tests.bench.gateway.closed_loop import warm
from tests.bench.gateway.open_loop import open_loop
from tests.bench.gateway.report import fmt
from tests.bench.gateway.stats import CpuMeter
from tests.bench.gateway.targets import Target, new_session
from tests.harness import Stack, free_port, spawn, stop, wait_http

HOP_BY_HOP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}
SESSION = web.AppKey("session", aiohttp.ClientSession)


def relay_app(upstream: str) -> web.Application:
    async def relay(request: web.Request) -> web.Response:
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        async with request.app[SESSION].post(upstream + request.path_qs, data=body, headers=headers) as answer:
            data = await answer.read()
            return web.Response(body=data, status=answer.status, content_type=answer.content_type)

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def session_ctx(app: web.Application) -> AsyncIterator[None]:
        app[SESSION] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        yield
        await app[SESSION].close()

    app = web.Application()
    app.cleanup_ctx.append(session_ctx)
    app.router.add_get("/health", health)
    app.router.add_post("/{path:.*}", relay)
    return app


async def floor_rows(stack: Stack, direct: Target, rates: list[float], seconds: float, arrivals: str,
                     gateway_cpu: dict[float, float | None], out: Callable[[str], None]) -> list[dict]:
    """The open loop at ``rates`` (the ladder's seeds, so the same schedules) against a relay started here in
    front of ``stack``'s simulator; each row beside the gateway's CPU per request at that rate."""
    url = URL(direct.url)
    port = free_port()
    log = stack.folder / "relay-floor.log"
    proc = spawn(["tests.bench.gateway.relay_floor", "--port", str(port), "--upstream", str(url.origin())], log)
    rows: list[dict] = []
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc, log)
        target = replace(direct, name="floor", url=f"http://127.0.0.1:{port}{url.path}")
        cpu = CpuMeter({"gateway": proc.pid, "simulator": stack.simulator.pid})  # "gateway": the relay here
        session = new_session()
        try:
            await warm(session, target, 10, requests=30)
            out("\n== the floor: a bare aiohttp relay (tests/bench/gateway/relay_floor.py) in front of the same "
                "simulator, the same open loop\n  rate |  floor ach    p50     p99  err | cpu us/req floor  gateway"
                "  gateway/floor")
            for i, rate in enumerate(rates):
                s = (await open_loop(session, target, rate=rate, seconds=seconds, seed=i, arrivals=arrivals,
                                     cpu=cpu)).summary()
                mine, theirs = s.get("gateway_cpu_us_per_req"), gateway_cpu.get(rate)
                times = round(theirs / mine, 2) if mine and theirs else None
                rows.append({"rate_rps": rate, "floor": s, "floor_cpu_us_per_req": mine,
                             "gateway_cpu_us_per_req": theirs, "gateway_over_floor": times})
                out(f"{rate:>6.0f} | {s['throughput_rps']:>10.0f} {fmt(s['p50_ms'], 6)} {fmt(s['p99_ms'])} "
                    f"{s['errors']:>4} | {fmt(mine, 16)} {fmt(theirs, 8)} {fmt(times, 14)}")
                await asyncio.sleep(0.2)
        finally:
            await session.close()
    finally:
        stop(proc)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--upstream", required=True, help="the simulator's base URL, e.g. http://127.0.0.1:8001")
    args = p.parse_args(argv)
    try:
        import uvloop
        loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is a dependency
        loop = asyncio.new_event_loop()
    web.run_app(relay_app(args.upstream.rstrip("/")), host="127.0.0.1", port=args.port, access_log=None,
                print=lambda *_: None, loop=loop)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
