"""Open loop: a seeded Poisson (or uniform) arrival schedule fired on time whatever the completions,
latency measured from the scheduled time (no coordinated omission), and the rate ladder that
stops once the gateway's added p99 is over budget twice in a row or errors appear."""

from __future__ import annotations

import asyncio
import gc
import random
import time
from dataclasses import dataclass
from typing import Callable

import aiohttp

from tests.bench.gateway.stats import NO_CPU, CpuMeter, Level, added, listen_counters
from tests.bench.gateway.targets import RequestFailed, Target, call

ADDED_P99_BUDGET_MS = 20.0
MAX_IN_FLIGHT = 5000     # open loop: beyond this, scheduled requests are dropped and counted as errors


def schedule(rate: float, seconds: float, seed: int, arrivals: str = "poisson") -> list[float]:
    """Offsets (s) of the arrivals in [0, seconds): Poisson (seeded, so direct and gateway get the same) or uniform."""
    if arrivals == "uniform":
        return [i / rate for i in range(int(rate * seconds))]
    rng, t, out = random.Random(seed), 0.0, []
    while True:
        t += rng.expovariate(rate)
        if t >= seconds:
            return out
        out.append(t)


async def open_loop(session: aiohttp.ClientSession, target: Target, *, rate: float, seconds: float, seed: int = 1,
                    arrivals: str = "poisson", cpu: CpuMeter = NO_CPU) -> Level:
    """Fire requests at their scheduled times whatever the completions; latency = end - scheduled time."""
    level = Level(target.name, False)
    loop = asyncio.get_running_loop()
    in_flight = 0

    async def one(at: float) -> None:
        nonlocal in_flight
        level.lags.append(time.perf_counter() - at)
        try:
            end, _ = await call(session, target, False)
        except (RequestFailed, aiohttp.ClientError, asyncio.TimeoutError) as exc:
            level.fail(f"{type(exc).__name__}: {exc}")
        else:
            level.latencies.append(end - at)
        finally:
            in_flight -= 1

    offsets = schedule(rate, seconds, seed, arrivals)
    level.offered, level.window_s = len(offsets), seconds
    tasks = []
    gc.collect()
    before, listen_before = cpu.read(), listen_counters()
    start = time.perf_counter() + 0.01
    for offset in offsets:
        at = start + offset
        delay = at - time.perf_counter()
        if delay > 0.0005:
            await asyncio.sleep(delay)
        level.requests += 1
        if in_flight >= MAX_IN_FLIGHT:
            level.fail(f"dropped: {in_flight} in flight")
            continue
        in_flight += 1
        tasks.append(loop.create_task(one(at)))
    await asyncio.gather(*tasks)
    level.seconds = time.perf_counter() - start   # to the last completion
    cpu.charge(level, before)
    listen_after = listen_counters()
    if "ListenOverflows" in listen_before and "ListenOverflows" in listen_after:
        level.listen_overflows = listen_after["ListenOverflows"] - listen_before["ListenOverflows"]
    return level


@dataclass
class RateRow:
    rate: float
    direct: dict | None
    gateway: dict | None

    @property
    def added_p50(self) -> float | None:
        return added(self.gateway["p50_ms"], self.direct["p50_ms"]) if self.gateway and self.direct else None

    @property
    def added_p99(self) -> float | None:
        return added(self.gateway["p99_ms"], self.direct["p99_ms"]) if self.gateway and self.direct else None

    @property
    def gateway_ok(self) -> bool:
        return bool(self.gateway and self.direct) and self.gateway["errors"] == 0 and self.direct["errors"] == 0 \
            and self.added_p99 is not None and self.added_p99 <= ADDED_P99_BUDGET_MS


def saturated(s: dict, rate: float) -> str | None:
    """Why a run at ``rate`` counts as saturated, or None."""
    if s["errors"]:
        return f"{s['errors']} errors"
    offered = s.get("offered_rps") or rate
    if s["throughput_rps"] < 0.95 * offered:
        return f"achieved {s['throughput_rps']:.0f} < 95% of offered {offered:.0f}"
    if s["p99_ms"] is None or s["p99_ms"] > ADDED_P99_BUDGET_MS:
        return f"p99 {s['p99_ms']:.1f} ms > {ADDED_P99_BUDGET_MS:g} ms"
    return None


async def rate_ladder(sessions: dict[str, aiohttp.ClientSession], direct: Target, gateway: Target,
                      rates: list[float], seconds: float, arrivals: str = "poisson", cpu: CpuMeter = NO_CPU,
                      on_row: Callable[[RateRow], None] = lambda row: None) -> dict:
    rows: list[RateRow] = []
    bad_in_row = 0
    gateway_stopped_at = None
    direct_saturated_at, direct_reason = None, None
    for i, rate in enumerate(rates):
        d = (await open_loop(sessions[direct.name], direct, rate=rate, seconds=seconds, seed=i, arrivals=arrivals,
                             cpu=cpu)).summary()
        g = None
        if gateway_stopped_at is None:
            await asyncio.sleep(0.2)
            g = (await open_loop(sessions[gateway.name], gateway, rate=rate, seconds=seconds, seed=i,
                                 arrivals=arrivals, cpu=cpu)).summary()
        row = RateRow(rate, d, g)
        rows.append(row)
        on_row(row)
        why = saturated(d, rate)
        if why and direct_saturated_at is None:
            direct_saturated_at, direct_reason = rate, why
        if gateway_stopped_at is None:
            bad_in_row = 0 if row.gateway_ok else bad_in_row + 1
            if g["errors"] or d["errors"] or bad_in_row >= 2:
                gateway_stopped_at = rate
        if gateway_stopped_at is not None and direct_saturated_at is not None:
            break
        # let an overloaded gateway drain before the next direct run shares the cores with it
        await asyncio.sleep(2.0 if g is not None and (g["errors"] or not row.gateway_ok) else 0.2)
    knee = max((r.rate for r in rows if r.gateway_ok), default=None)
    return {
        "arrivals": arrivals, "seconds_per_rate": seconds, "budget_added_p99_ms": ADDED_P99_BUDGET_MS,
        "knee_rps": knee, "gateway_ladder_stopped_at_rps": gateway_stopped_at,
        "direct_saturated_at_rps": direct_saturated_at, "direct_saturation_reason": direct_reason,
        "direct_max_rate_tried_rps": rows[-1].rate if rows else None,
        "rows": [{"rate_rps": r.rate, "direct": r.direct, "gateway": r.gateway,
                  "added_p50_ms": r.added_p50, "added_p99_ms": r.added_p99,
                  "within_budget": None if r.gateway is None else r.gateway_ok} for r in rows],
    }
