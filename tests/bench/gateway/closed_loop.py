"""Closed loop: ``concurrency`` workers sending back to back, and the direct-vs-gateway comparison
in alternating rounds (D G D G ...) so slow drift on a shared machine hits both alike."""

from __future__ import annotations

import asyncio
import gc
import statistics
import time

import aiohttp

from tests.bench.gateway.stats import NO_CPU, CpuMeter, Level
from tests.bench.gateway.targets import RequestFailed, Target, call


async def closed_loop(session: aiohttp.ClientSession, target: Target, *, stream: bool, concurrency: int,
                      requests: int, cpu: CpuMeter = NO_CPU, timing: list[str] | None = None) -> Level:
    """``concurrency`` workers issue ``requests`` requests back to back; latency from send to end (or TTFT).
    ``timing`` collects the answers' ``Server-Timing`` headers (``targets.call``)."""
    level = Level(target.name, stream)
    left = requests

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            level.requests += 1
            t0 = time.perf_counter()
            try:
                end, first = await call(session, target, stream, timing)
            except (RequestFailed, aiohttp.ClientError, asyncio.TimeoutError) as exc:
                level.fail(f"{type(exc).__name__}: {exc}")
                continue
            if stream:
                level.latencies.append(first - t0)
                level.totals.append(end - t0)
            else:
                level.latencies.append(end - t0)

    before = cpu.read()
    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    level.seconds = time.perf_counter() - t0
    cpu.charge(level, before)
    return level


async def warm(session: aiohttp.ClientSession, target: Target, concurrency: int, requests: int | None = None) -> None:
    """Fill the keep-alive pools (client's and gateway's upstream) to ``concurrency`` connections."""
    for stream in (False, True):
        await closed_loop(session, target, stream=stream, concurrency=concurrency,
                          requests=requests or max(2 * concurrency, 40))


async def compare_closed(sessions: dict[str, aiohttp.ClientSession], direct: Target, gateway: Target, *,
                         stream: bool, concurrency: int, requests: int, rounds: int = 2,
                         cpu: CpuMeter = NO_CPU) -> tuple[Level, Level]:
    """Direct and gateway in alternating rounds (D G D G ...) so slow drift hits both alike."""
    d, g = Level(direct.name, stream), Level(gateway.name, stream)
    per_round = max(1, requests // rounds)
    for target in (direct, gateway):
        await closed_loop(sessions[target.name], target, stream=stream, concurrency=concurrency,
                          requests=max(2 * concurrency, 40))
    for _ in range(rounds):
        for target, acc in ((direct, d), (gateway, g)):
            gc.collect()
            acc.merge(await closed_loop(sessions[target.name], target, stream=stream, concurrency=concurrency,
                                        requests=per_round, cpu=cpu))
    return d, g


def server_timing(headers: list[str]) -> dict[str, float]:
    """The median of each ``Server-Timing`` metric over ``headers`` (``name;dur=ms, ...``), in ms."""
    values: dict[str, list[float]] = {}
    for header in headers:
        for part in header.split(","):
            name, sep, dur = part.strip().partition(";dur=")
            if sep:
                values.setdefault(name, []).append(float(dur))
    return {name: round(statistics.median(v), 3) for name, v in values.items()}
