"""What farebox adds to latency: ``python -m tests.bench.gateway`` (``make bench``).

One stack (provider simulator with ttft 0 / instant tokens / 32 output tokens,
plus a real ``farebox serve`` process) is driven by ONE client (aiohttp, one
event loop, uvloop when available) that measures the simulator directly and
through the gateway with the same code, in alternating rounds, so the
difference is what the gateway adds (its own work plus one more hop and one
more process competing for the same cores).

Sections:
  1. closed loop, non-streaming: latency p50/p99 direct vs gateway at c=1/10/100
  2. closed loop, streaming: time to first content token p50/p99, same levels
     (both for chat-openai and, unless --no-anthropic, chat-anthropic vs /v1/messages)
  3. open loop: a Poisson arrival schedule per rate, requests fired on schedule
     regardless of completions, latency measured from the SCHEDULED time (no
     coordinated omission); the ladder stops once the gateway's added p99 is over
     the budget (20 ms) twice in a row or errors appear; then the direct run
     continues alone until it saturates, to show where the client/simulator limit is.

Figures are printed as tables and written to var/bench/gateway.json.
``--profile`` instead runs the gateway under cProfile for a fixed load and
prints where its time goes (figures under cProfile are not latency figures).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import platform
import random
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import aiohttp
import orjson

from infra.simulator.generation import VOCAB
from tests.harness import ROOT, Stack, generous_limits, running_stack

PROMPT = " ".join(VOCAB[i % len(VOCAB)] for i in range(1000))[:4096]
MAX_TOKENS = 64
SIM_OPENAI_KEY = "sk-sim-openai-retail-0001"        # examples/simulator.yaml, account acct-retail
SIM_ANTHROPIC_KEY = "sk-sim-anthropic-retail-0001"  # account acct-retail-anthropic
ADDED_P99_BUDGET_MS = 20.0
OUT_JSON = ROOT / "var" / "bench" / "gateway.json"
OUT_PROF = ROOT / "var" / "bench" / "gateway.prof"
REQUEST_TIMEOUT_S = 10.0
MAX_IN_FLIGHT = 5000     # open loop: beyond this, scheduled requests are dropped and counted as errors


# --------------------------------------------------------------------------- targets


@dataclass(frozen=True)
class Target:
    """One endpoint with its pre-encoded bodies; ``wire`` is the dialect of the response stream."""

    name: str
    url: str
    headers: dict[str, str]
    body: bytes
    stream_body: bytes
    wire: str  # "openai" | "anthropic"


def openai_target(name: str, url: str, model: str, key: str) -> Target:
    obj = {"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_completion_tokens": MAX_TOKENS}
    stream = obj | {"stream": True, "stream_options": {"include_usage": True}}
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    return Target(name, url, headers, orjson.dumps(obj), orjson.dumps(stream), "openai")


def anthropic_target(name: str, url: str, model: str, key: str) -> Target:
    obj = {"model": model, "max_tokens": MAX_TOKENS, "messages": [{"role": "user", "content": PROMPT}]}
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01", "Content-Type": "application/json"}
    return Target(name, url, headers, orjson.dumps(obj), orjson.dumps(obj | {"stream": True}), "anthropic")


def pairs(stack: Stack, anthropic: bool = True) -> dict[str, tuple[Target, Target]]:
    """(direct, gateway) per dialect."""
    out = {
        "openai": (
            openai_target("direct", stack.sim_url + "/v1/chat/completions", "sim-gpt-mid-2026-08", SIM_OPENAI_KEY),
            openai_target("gateway", stack.gateway_url + "/v1/chat/completions", "chat-openai", stack.key),
        )
    }
    if anthropic:
        out["anthropic"] = (
            anthropic_target("direct", stack.sim_url + "/v1/messages", "sim-claude-mid-2026-08", SIM_ANTHROPIC_KEY),
            # the gateway speaks OpenAI to the caller and Anthropic to the provider
            openai_target("gateway", stack.gateway_url + "/v1/chat/completions", "chat-anthropic", stack.key),
        )
    return out


def new_session() -> aiohttp.ClientSession:
    """One keep-alive pool per target, kept for the whole run (no connects inside measurements)."""
    conn = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=120, force_close=False)
    return aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
                                 auto_decompress=False, skip_auto_headers=("User-Agent",))


# --------------------------------------------------------------------------- one request


class RequestFailed(Exception):
    pass


def _first_content(line: bytes, wire: str) -> bool:
    if wire == "openai":
        if not line.startswith(b"data: {") or b'"content"' not in line:
            return False
        choices = orjson.loads(line[6:]).get("choices") or ()
        return bool(choices and (choices[0].get("delta") or {}).get("content"))
    if not line.startswith(b"data: ") or b"content_block_delta" not in line:
        return False
    delta = orjson.loads(line[6:]).get("delta") or {}
    return bool(delta.get("text") or delta.get("partial_json"))


_END = {"openai": b"data: [DONE]", "anthropic": b'"message_stop"}'}


async def call(session: aiohttp.ClientSession, target: Target, stream: bool) -> tuple[float, float | None]:
    """Do one request; returns (end, first-content-token time) as perf_counter values, or raises RequestFailed."""
    async with session.post(target.url, data=target.stream_body if stream else target.body,
                            headers=target.headers) as resp:
        if resp.status != 200:
            body = await resp.read()
            raise RequestFailed(f"HTTP {resp.status}: {body[:200]!r}")
        if not stream:
            await resp.read()
            return time.perf_counter(), None
        first = None
        while True:
            line = await resp.content.readline()
            if not line:
                raise RequestFailed("stream ended before the first content token")
            if _first_content(line, target.wire):
                first = time.perf_counter()
                break
        rest = await resp.content.read()
        end = time.perf_counter()
        last = rest.rstrip()
        if not last.endswith(_END[target.wire]):
            raise RequestFailed(f"stream not terminated: ...{last[-120:]!r}")
        return end, first


# --------------------------------------------------------------------------- stats


def pct(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list, in the list's units."""
    if not sorted_values:
        return float("nan")
    return sorted_values[max(0, min(len(sorted_values) - 1, math.ceil(q * len(sorted_values)) - 1))]


@dataclass
class Level:
    """One run at one level against one target. Latencies in seconds (kept out of the JSON)."""

    target: str
    stream: bool
    requests: int = 0
    errors: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)   # non-stream: total; stream: TTFT (open loop: from schedule)
    totals: list[float] = field(default_factory=list)      # stream only: whole stream
    lags: list[float] = field(default_factory=list)        # open loop: how late the client fired
    error_samples: list[str] = field(default_factory=list)
    cpu_gateway_s: float | None = None
    cpu_simulator_s: float | None = None
    cpu_client_s: float | None = None
    listen_overflows: int | None = None                    # open loop: machine-wide, during the level
    offered: int = 0                                       # open loop: scheduled arrivals
    window_s: float = 0.0                                  # open loop: length of the schedule

    def fail(self, why: str) -> None:
        self.errors += 1
        if len(self.error_samples) < 3:
            self.error_samples.append(why)

    def merge(self, other: "Level") -> None:
        self.requests += other.requests
        self.errors += other.errors
        self.seconds += other.seconds
        self.latencies += other.latencies
        self.totals += other.totals
        self.lags += other.lags
        self.error_samples = (self.error_samples + other.error_samples)[:3]
        for name in ("cpu_gateway_s", "cpu_simulator_s", "cpu_client_s"):
            a, b = getattr(self, name), getattr(other, name)
            setattr(self, name, None if a is None and b is None else (a or 0.0) + (b or 0.0))

    def summary(self) -> dict:
        lat, tot, lag = sorted(self.latencies), sorted(self.totals), sorted(self.lags)
        ms = lambda v: None if math.isnan(v) else round(v * 1000, 3)  # noqa: E731
        out = {
            "requests": self.requests, "ok": len(self.latencies), "errors": self.errors,
            "throughput_rps": round(len(self.latencies) / self.seconds, 1) if self.seconds else 0.0,
            "p50_ms": ms(pct(lat, 0.50)), "p90_ms": ms(pct(lat, 0.90)), "p99_ms": ms(pct(lat, 0.99)),
            "max_ms": ms(lat[-1]) if lat else None,
        }
        if tot:
            out |= {"total_p50_ms": ms(pct(tot, 0.50)), "total_p99_ms": ms(pct(tot, 0.99))}
        if lag:
            out |= {"lag_p50_ms": ms(pct(lag, 0.50)), "lag_p99_ms": ms(pct(lag, 0.99))}
        n = len(self.latencies) or 1
        if self.cpu_gateway_s is not None:
            out["gateway_cpu_us_per_req"] = round(self.cpu_gateway_s / n * 1e6, 1)
        if self.cpu_simulator_s is not None:
            out["simulator_cpu_us_per_req"] = round(self.cpu_simulator_s / n * 1e6, 1)
        if self.cpu_client_s is not None:
            out["client_cpu_us_per_req"] = round(self.cpu_client_s / n * 1e6, 1)
            cores = sum(v or 0.0 for v in (self.cpu_client_s, self.cpu_simulator_s, self.cpu_gateway_s))
            out["cores_busy"] = round(cores / self.seconds, 2) if self.seconds else None
        if self.window_s:
            out["offered_rps"] = round(self.offered / self.window_s, 1)
        if self.listen_overflows is not None:
            out["listen_overflows"] = self.listen_overflows
        if self.error_samples:
            out["error_samples"] = self.error_samples
        return out


class CpuMeter:
    """CPU seconds (user+system) of the gateway and simulator processes, from /proc (Linux only)."""

    def __init__(self, pids: dict[str, int] | None) -> None:
        self.pids = pids or {}
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def read(self) -> dict[str, float]:
        out = {"client": time.process_time()}
        for name, pid in self.pids.items():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                out[name] = (int(fields[11]) + int(fields[12])) / self.tick
            except (OSError, IndexError, ValueError):
                pass
        return out

    def charge(self, level: Level, before: dict[str, float]) -> None:
        after = self.read()
        if "gateway" in before and "gateway" in after:
            level.cpu_gateway_s = after["gateway"] - before["gateway"]
        if "simulator" in before and "simulator" in after:
            level.cpu_simulator_s = after["simulator"] - before["simulator"]
        level.cpu_client_s = after["client"] - before["client"]


NO_CPU = CpuMeter(None)


def listen_counters() -> dict[str, int]:
    """Machine-wide TCP listen-queue overflows/drops (SYNs dropped because an accept backlog was full)."""
    try:
        lines = Path("/proc/net/netstat").read_text().splitlines()
    except OSError:
        return {}
    for head, values in zip(lines[::2], lines[1::2]):
        if head.startswith("TcpExt:"):
            table = dict(zip(head.split()[1:], values.split()[1:]))
            return {k: int(table[k]) for k in ("ListenOverflows", "ListenDrops") if k in table}
    return {}


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds per thread of ``pid`` ("main" is the event loop thread), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        name = "main" if int(tid) == pid else "other threads"
        out[name] = round(out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick, 2)
    return out


# --------------------------------------------------------------------------- closed loop


async def closed_loop(session: aiohttp.ClientSession, target: Target, *, stream: bool, concurrency: int,
                      requests: int, cpu: CpuMeter = NO_CPU) -> Level:
    """``concurrency`` workers issue ``requests`` requests back to back; latency from send to end (or TTFT)."""
    level = Level(target.name, stream)
    left = requests

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            level.requests += 1
            t0 = time.perf_counter()
            try:
                end, first = await call(session, target, stream)
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


# --------------------------------------------------------------------------- open loop


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


# --------------------------------------------------------------------------- printing


def fmt(v: float | None, width: int = 7, prec: int = 2) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-".rjust(width)
    return f"{v:{width}.{prec}f}"


def added(g: float | None, d: float | None) -> float | None:
    return None if g is None or d is None else round(g - d, 3)


def ratio(g: float | None, d: float | None) -> str:
    return f"{g / d:5.2f}x" if d and g is not None else "    -"


def closed_table(title: str, metric: str, rows: list[dict]) -> str:
    lines = [title,
             f"{'conc':>5} {'n':>6} | {'direct p50':>10} {'p99':>7} | {'gateway p50':>11} {'p99':>7} | "
             f"{'added p50':>9} {'p99':>7} | {'ratio p50':>9} {'p99':>6} | {'rps d/g':>11} | "
             f"{'cpu us/req cli/sim/gw':>21} {'cores':>5} | {'errors d/g':>10}",
             ]
    for r in rows:
        d, g = r["direct"], r["gateway"]
        mark = "  <-- ERRORS" if d["errors"] or g["errors"] else ""
        lines.append(
            f"{r['concurrency']:>5} {d['requests']:>6} | {fmt(d['p50_ms'], 10)} {fmt(d['p99_ms'])} | "
            f"{fmt(g['p50_ms'], 11)} {fmt(g['p99_ms'])} | {fmt(r['added_p50_ms'], 9)} {fmt(r['added_p99_ms'])} | "
            f"{ratio(g['p50_ms'], d['p50_ms']):>9} {ratio(g['p99_ms'], d['p99_ms']):>6} | "
            f"{d['throughput_rps']:>5.0f}/{g['throughput_rps']:<5.0f} | "
            f"{cpu_cell(g)} | {d['errors']:>4}/{g['errors']:<5}{mark}")
    lines.append(f"  ({metric}; ms; cpu = CPU per request of client, simulator, gateway during the gateway runs;"
                 f" cores = cores busy in total)")
    return "\n".join(lines)


def cpu_cell(s: dict) -> str:
    parts = [fmt(s.get(k), 5, 0).strip() for k in ("client_cpu_us_per_req", "simulator_cpu_us_per_req",
                                                     "gateway_cpu_us_per_req")]
    return f"{'/'.join(parts):>21} {fmt(s.get('cores_busy'), 5)}"


def rate_header() -> str:
    return (f"{'rate':>6} | {'direct ach':>10} {'p50':>6} {'p99':>7} {'lag99':>6} {'err':>4} | "
            f"{'gateway ach':>11} {'p50':>6} {'p99':>7} {'lag99':>6} {'err':>4} | {'added p50':>9} {'p99':>7} "
            f"{'ratio p99':>9} | {'cpu us/req cli/sim/gw':>21} {'cores':>5}")


def rate_line(row: RateRow) -> str:
    d, g = row.direct, row.gateway
    left = (f"{row.rate:>6.0f} | {d['throughput_rps']:>10.0f} {fmt(d['p50_ms'], 6)} {fmt(d['p99_ms'])} "
            f"{fmt(d.get('lag_p99_ms'), 6)} {d['errors']:>4} | ")
    why = saturated(d, row.rate)
    notes = [f"{side} listen-queue overflows {s['listen_overflows']}" for side, s in (("direct", d), ("gateway", g))
             if s and s.get("listen_overflows")]
    if why:
        notes.append(f"direct saturated: {why}")
    if g is None:
        return left + f"{'(gateway ladder stopped)':>40}" + "".join(f"   {n}" for n in notes)
    mark = "" if row.gateway_ok else "  <-- over budget" if not (g["errors"] or d["errors"]) else "  <-- ERRORS"
    return (left + f"{g['throughput_rps']:>11.0f} {fmt(g['p50_ms'], 6)} {fmt(g['p99_ms'])} "
            f"{fmt(g.get('lag_p99_ms'), 6)} {g['errors']:>4} | {fmt(row.added_p50, 9)} {fmt(row.added_p99)} "
            f"{ratio(g['p99_ms'], d['p99_ms']):>9} | {cpu_cell(g)}{mark}" + "".join(f"   {n}" for n in notes))


# --------------------------------------------------------------------------- main


@dataclass
class Plan:
    levels: dict[int, int]           # concurrency -> requests (per target)
    rates: list[float]
    seconds_per_rate: float
    anthropic: bool = True
    arrivals: str = "poisson"


FULL = Plan(levels={1: 600, 10: 2400, 100: 3000},
            rates=[50, 100, 200, 300, 400, 500, 600, 700, 800, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000, 4000],
            seconds_per_rate=5.0)
QUICK = Plan(levels={1: 60, 10: 200, 100: 300}, rates=[50, 200], seconds_per_rate=1.0)


def machine_facts(uvloop_used: bool) -> dict:
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        affinity = None
    return {
        "cpu_count": os.cpu_count(), "cpus_usable": affinity, "python": platform.python_version(),
        "implementation": platform.python_implementation(), "platform": platform.platform(),
        "client_loop": "uvloop" if uvloop_used else "asyncio", "aiohttp": aiohttp.__version__,
        "loadavg_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "processes": "client (this process), simulator, gateway: 3 processes sharing the cores",
    }


async def run_bench(stack: Stack, plan: Plan, out: Callable[[str], None] = print) -> dict:
    cpu = CpuMeter({"gateway": stack.gateway.pid, "simulator": stack.simulator.pid})
    report: dict = {"closed_loop": {}, "open_loop": None}
    sessions = {"direct": new_session(), "gateway": new_session()}
    try:
        for dialect, (direct, gateway) in pairs(stack, plan.anthropic).items():
            out(f"\nwarming up {dialect} ...")
            for target in (direct, gateway):
                await warm(sessions[target.name], target, max(plan.levels), requests=3 * max(plan.levels))
            report["closed_loop"][dialect] = {}
            for stream in (False, True):
                rows = []
                for conc, n in plan.levels.items():
                    d, g = await compare_closed(sessions, direct, gateway, stream=stream, concurrency=conc,
                                                requests=n, cpu=cpu)
                    ds, gs = d.summary(), g.summary()
                    rows.append({"concurrency": conc, "direct": ds, "gateway": gs,
                                 "added_p50_ms": added(gs["p50_ms"], ds["p50_ms"]),
                                 "added_p99_ms": added(gs["p99_ms"], ds["p99_ms"])})
                    for side, s in (("direct", ds), ("gateway", gs)):
                        for sample in s.get("error_samples", []):
                            out(f"  error sample ({dialect}, c={conc}, {side}): {sample}")
                kind = "streaming" if stream else "non_streaming"
                report["closed_loop"][dialect][kind] = rows
                what = (f"direct sim {'/v1' + direct.url.split('/v1', 1)[1]}{' (Anthropic wire)' if direct.wire == 'anthropic' else ''}"
                        f" vs gateway /v1/chat/completions model {orjson.loads(gateway.body)['model']}")
                title = (f"\n== closed loop, {'STREAMING: time to first content token' if stream else 'non-streaming: latency'}"
                         f" -- {dialect}: {what}")
                out(closed_table(title, "TTFT, streams read to the end" if stream else "full response", rows))
        direct, gateway = pairs(stack, False)["openai"]
        out(f"\n== open loop, non-streaming, openai, {plan.arrivals} arrivals, {plan.seconds_per_rate:g} s per rate;"
            f" latency from the scheduled send time; budget: added p99 <= {ADDED_P99_BUDGET_MS:g} ms")
        out(rate_header())
        ladder = await rate_ladder(sessions, direct, gateway, plan.rates, plan.seconds_per_rate, plan.arrivals,
                                   cpu=cpu, on_row=lambda row: out(rate_line(row)))
        out("  (ach = achieved completions/s; lag99 = p99 of how late the client fired vs the schedule: if it grows,"
            " the client is the limit)")
        report["open_loop"] = ladder
        report["gateway_thread_cpu_s"] = thread_cpu(stack.gateway.pid)
        out(f"  gateway process CPU over the whole run, by thread: {report['gateway_thread_cpu_s']}"
            " (main = event loop; others = event-log writer, to_thread workers)")
        return report
    finally:
        for s in sessions.values():
            await s.close()


def summary_lines(report: dict) -> list[str]:
    lines = ["\n== summary"]
    for dialect, kinds in report["closed_loop"].items():
        for kind, rows in kinds.items():
            parts = [f"c={r['concurrency']}: {fmt(r['added_p50_ms'], 0)}/{fmt(r['added_p99_ms'], 0)} ms" for r in rows]
            label = "TTFT" if kind == "streaming" else "latency"
            lines.append(f"  {dialect:<9} {kind:<13} added {label} p50/p99  " + "   ".join(parts))
    ladder = report.get("open_loop")
    if ladder:
        knee = ladder["knee_rps"]
        lines.append(f"  knee (highest rate with gateway added p99 <= {ladder['budget_added_p99_ms']:g} ms, no errors): "
                     + (f"{knee:g} req/s" if knee is not None else "none of the rates tried"))
        if ladder["direct_saturated_at_rps"] is not None:
            lines.append(f"  direct run saturates at {ladder['direct_saturated_at_rps']:g} req/s "
                         f"({ladder['direct_saturation_reason']}): the client+simulator ceiling")
        else:
            lines.append(f"  direct run did not saturate up to {ladder['direct_max_rate_tried_rps']:g} req/s")
        if knee is not None and ladder["direct_saturated_at_rps"] is not None:
            limit = "the gateway" if knee < ladder["direct_saturated_at_rps"] else "the client/simulator"
            lines.append(f"  -> the knee is set by {limit}")
    return lines


async def run_profile(stack: Stack, requests: int, out: Callable[[str], None] = print) -> dict:
    """A fixed load through the gateway only (direct is not needed: cProfile distorts timings anyway)."""
    _, gateway = pairs(stack, False)["openai"]
    session = new_session()
    try:
        await warm(session, gateway, 10)
        res = {}
        for stream in (False, True):
            lvl = await closed_loop(session, gateway, stream=stream, concurrency=10, requests=requests)
            res["streaming" if stream else "non_streaming"] = lvl.summary()
            out(f"  profiled load: {'stream' if stream else 'non-stream'} c=10 {requests} requests, "
                f"{lvl.summary()['throughput_rps']:.0f} req/s, errors {lvl.errors}")
        res["gateway_thread_cpu_s"] = thread_cpu(stack.gateway.pid)
        out(f"  gateway CPU by thread (s): {res['gateway_thread_cpu_s']} (main = event loop, profiled; "
            "others = event-log writer etc., not in the profile)")
        return res
    finally:
        await session.close()


def print_profile(path: Path, requests: int, out: Callable[[str], None] = print) -> None:
    import io
    import pstats

    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        stats = pstats.Stats(str(path), stream=buf)
        stats.strip_dirs().sort_stats(key).print_stats(30)
        out(f"\n== gateway cProfile, top 30 by {key} (main thread; {requests} requests x 2 + warm-up)")
        out(buf.getvalue().split("\n", 4)[-1] if "function calls" in buf.getvalue() else buf.getvalue())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small counts, for a smoke run (< 30 s)")
    ap.add_argument("--rates", help="comma-separated open-loop rates in req/s (default: a ladder 50..4000)")
    ap.add_argument("--seconds-per-rate", type=float, help="open-loop seconds per rate (default 5, quick 1)")
    ap.add_argument("--uniform", action="store_true", help="uniform instead of Poisson arrivals")
    ap.add_argument("--no-anthropic", action="store_true", help="skip the chat-anthropic vs /v1/messages tables")
    ap.add_argument("--profile", action="store_true",
                    help=f"run the gateway under cProfile for a fixed load, print the top functions, save {OUT_PROF}")
    ap.add_argument("--profile-requests", type=int, default=3000)
    ap.add_argument("--json", type=Path, default=OUT_JSON, help="where to write the figures")
    args = ap.parse_args(argv)

    base = QUICK if args.quick else FULL
    plan = Plan(levels=dict(base.levels),
                rates=[float(r) for r in args.rates.split(",")] if args.rates else list(base.rates),
                seconds_per_rate=args.seconds_per_rate or base.seconds_per_rate,
                anthropic=not args.no_anthropic, arrivals="uniform" if args.uniform else "poisson")

    try:
        import uvloop
        loop_factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover
        loop_factory = None
    facts = machine_facts(loop_factory is not None)
    print(f"farebox gateway bench: {facts['cpus_usable']} usable cores (cpu_count {facts['cpu_count']}), "
          f"Python {facts['python']} ({facts['implementation']}), client loop {facts['client_loop']}, "
          f"aiohttp {facts['aiohttp']}, loadavg {facts['loadavg_at_start']}")
    print(f"simulator: ttft 0, tokens_per_s 0 (instant), 32 output tokens; prompt {len(PROMPT)} B; "
          f"{facts['processes']}")

    with tempfile.TemporaryDirectory(prefix="farebox-bench-") as tmp:
        if args.profile:
            OUT_PROF.parent.mkdir(parents=True, exist_ok=True)
            OUT_PROF.unlink(missing_ok=True)
            with running_stack(Path(tmp), gateway_wrap=("cProfile", "-o", str(OUT_PROF), "-m"), mutate=generous_limits) as stack:
                with asyncio.Runner(loop_factory=loop_factory) as runner:
                    runner.run(run_profile(stack, args.profile_requests))
            # the stack's exit sent SIGTERM: aiohttp shuts down gracefully and cProfile writes its file
            if not OUT_PROF.exists():
                print(f"no profile written to {OUT_PROF}", file=sys.stderr)
                return 1
            print_profile(OUT_PROF, args.profile_requests)
            print(f"\nprofile saved to {OUT_PROF} (python -m pstats {OUT_PROF.relative_to(ROOT)})")
            return 0

        started = time.monotonic()
        with running_stack(Path(tmp), mutate=generous_limits) as stack:
            with asyncio.Runner(loop_factory=loop_factory) as runner:
                report = runner.run(run_bench(stack, plan))
    report = {"machine": facts, "plan": asdict(plan), "prompt_bytes": len(PROMPT), "output_tokens": 32,
              "elapsed_s": round(time.monotonic() - started, 1), **report}
    for line in summary_lines(report):
        print(line)
    errors = sum(r[side]["errors"] for kinds in report["closed_loop"].values() for rows in kinds.values()
                 for r in rows for side in ("direct", "gateway"))
    print(f"  closed-loop errors: {errors}; elapsed {report['elapsed_s']} s")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2))
    print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
