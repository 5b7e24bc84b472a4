"""Memory under a long steady load: ``python -m tests.bench.soak`` (``make bench-soak``).

One gateway (embedded) in front of the simulator, offered an open-loop Poisson load for ``--minutes`` (30) at
``--rate`` requests a second (default: 60% of ``--knee``, the knee ``make bench-overload`` reports on this
machine), a mix of what makes a gateway keep things: plain chat requests with prompts never seen before (60%),
streams (20%), exact-cache hits of a few hot prompts (10%) and idempotent retries, the same
``Idempotency-Key`` sent twice (10%). Every ``--sample-s`` (10 s) it reads the gateway process's resident set
(``/proc/<pid>/status``: VmRSS). The bar: RSS at the end within 10% of RSS after the first
``--warm-minutes`` (5). It prints the samples' summary and the verdict, and writes ``--json``.

Latency is reported too (p50/p99 from the scheduled send time), and every error is counted: a soak that loses
requests is not a soak.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson

from tests.bench.gateway.open_loop import schedule
from tests.bench.gateway.targets import new_session
from tests.bench.heap_wrap import growth
from tests.harness import generous_limits, running_stack

HOT_PROMPTS = 20  # the exact-cache hits cycle over these


def soak_config(tree: dict) -> None:
    generous_limits(tree)
    tree["aliases"].append({"name": "chat-soak-cached", "kind": "chat", "deployments": ["sim-openai-mumbai"],
                            "cache": {"exact": True}})


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


def _request(kind: str, i: int, rng: random.Random) -> tuple[dict, dict]:
    """(body, extra headers) of the ``i``-th request of ``kind``."""
    text = f"soak request {i} {rng.random():.12f}: summarise the ticket in one line"
    if kind == "cached":
        return {"model": "chat-soak-cached", "messages": [{"role": "user", "content": f"hot prompt {i % HOT_PROMPTS}"}],
                "max_completion_tokens": 8, "temperature": 0}, {}
    body = {"model": "chat-openai", "messages": [{"role": "user", "content": text}], "max_completion_tokens": 16}
    if kind == "stream":
        return body | {"stream": True, "stream_options": {"include_usage": True}}, {}
    if kind == "idempotent":
        return body, {"Idempotency-Key": f"soak-{i}"}
    return body, {}


async def _one(session: aiohttp.ClientSession, url: str, key: str, kind: str, i: int, rng: random.Random) -> int:
    body, extra = _request(kind, i, rng)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json", **extra}
    payload = orjson.dumps(body)
    for _ in range(2 if kind == "idempotent" else 1):  # the retry: the same key, the same body
        async with session.post(url, data=payload, headers=headers) as resp:
            await resp.read()
            if resp.status != 200:
                return resp.status
    return 200


MIX = {"plain": 0.6, "stream": 0.2, "cached": 0.1, "idempotent": 0.1}


def parse_mix(text: str) -> dict[str, float]:
    """``plain=6,stream=2,cached=1,idempotent=1`` -> shares adding up to 1 (to see which part of the mix keeps
    memory, run one part alone)."""
    mix = {}
    for part in text.split(","):
        name, _, weight = part.partition("=")
        if name not in MIX or not weight:
            raise SystemExit(f"--mix: parts are {', '.join(MIX)} with a weight each, like plain=6,stream=2")
        mix[name] = float(weight)
    total = sum(mix.values())
    return {k: v / total for k, v in mix.items()}


def kind_of(rng: random.Random, mix: dict[str, float] = MIX) -> str:
    r = rng.random()
    for kind, share in mix.items():
        if r < share:
            return kind
        r -= share
    return next(iter(mix))


async def soak(gateway_url: str, key: str, pid: int, *, rate: float, minutes: float, warm_minutes: float,
               sample_s: float, mix: dict[str, float] = MIX, heap: Path | None = None, out=print) -> dict:
    rng = random.Random(35)
    url = gateway_url + "/v1/chat/completions"
    offsets = schedule(rate, minutes * 60, seed=35)
    samples: list[tuple[float, int]] = []
    latencies: list[float] = []
    errors: dict[str, int] = {}
    session = new_session()
    loop = asyncio.get_running_loop()
    start = loop.time()
    tasks: set[asyncio.Task] = set()

    async def fire(i: int, at: float, kind: str) -> None:
        try:
            status = await _one(session, url, key, kind, i, rng)
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            status = type(exc).__name__  # type: ignore[assignment]
        if status != 200:
            errors[str(status)] = errors.get(str(status), 0) + 1
        latencies.append(loop.time() - at)

    async def sampler() -> None:
        snapped = False
        while True:
            samples.append((loop.time() - start, rss_kb(pid)))
            if heap is not None and not snapped and loop.time() - start >= warm_minutes * 60:
                os.kill(pid, signal.SIGUSR2)  # tracing starts: after the warm-up
                snapped = True
            await asyncio.sleep(sample_s)

    watch = asyncio.create_task(sampler())
    try:
        for i, offset in enumerate(offsets):
            at = start + offset
            delay = at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(fire(i, at, kind_of(rng, mix)))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        await asyncio.gather(*tasks)
        samples.append((loop.time() - start, rss_kb(pid)))
        if heap is not None:
            os.kill(pid, signal.SIGUSR2)  # kept.snap: what is still alive of it at the end
    finally:
        watch.cancel()
        await session.close()
    return summary(samples, latencies, errors, len(offsets), rate, minutes, warm_minutes, out)


def summary(samples: list[tuple[float, int]], latencies: list[float], errors: dict[str, int], offered: int,
            rate: float, minutes: float, warm_minutes: float, out=print) -> dict:
    warm = next((kb for t, kb in samples if t >= warm_minutes * 60), samples[-1][1])
    end, peak = samples[-1][1], max(kb for _, kb in samples)
    ordered = sorted(latencies)

    def pct(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000, 2) if ordered else 0.0

    growth = (end - warm) / warm
    report = {"rate": rate, "minutes": minutes, "offered": offered, "errors": errors, "p50_ms": pct(0.5),
              "p99_ms": pct(0.99), "rss_first_kb": samples[0][1], "rss_warm_kb": warm, "rss_end_kb": end,
              "rss_peak_kb": peak, "growth_after_warm": round(growth, 4), "within_10pct": abs(growth) <= 0.10,
              "samples": samples}
    out(f"soak: {offered} requests at {rate:g}/s over {minutes:g} min, errors {sum(errors.values())} {errors or ''}")
    out(f"  latency from the scheduled send: p50 {report['p50_ms']} ms, p99 {report['p99_ms']} ms")
    out(f"  gateway RSS: {samples[0][1] / 1024:.0f} MB at start, {warm / 1024:.0f} MB after {warm_minutes:g} min, "
        f"{end / 1024:.0f} MB at the end (peak {peak / 1024:.0f} MB): {growth * 100:+.1f}% after the warm-up "
        f"({'within' if report['within_10pct'] else 'NOT within'} 10%)")
    return report


def _await_snapshot(path: Path, timeout_s: float = 300.0) -> None:
    """A snapshot of a large heap takes a while to write: wait until its size stops changing."""
    deadline, last = time.monotonic() + timeout_s, -1
    while time.monotonic() < deadline:
        size = path.stat().st_size if path.exists() else -1
        if size > 0 and size == last:
            return
        last = size
        time.sleep(2.0)
    raise SystemExit(f"no heap snapshot at {path} after {timeout_s:g} s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.bench.soak", description=__doc__.split("\n\n")[0])
    ap.add_argument("--knee", type=float, default=400.0, help="the knee (req/s) make bench-overload measured here")
    ap.add_argument("--rate", type=float, help="requests a second (default: 60%% of --knee)")
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--warm-minutes", type=float, default=5.0)
    ap.add_argument("--sample-s", type=float, default=10.0)
    ap.add_argument("--mix", default="plain=6,stream=2,cached=1,idempotent=1")
    ap.add_argument("--json", default="var/bench/soak.json")
    ap.add_argument("--heap", type=Path, help="trace the gateway's allocations (tracemalloc; slows it: not for the "
                                               "figures) and print what grew after the warm-up; snapshots go here")
    args = ap.parse_args(argv)
    rate = args.rate or 0.6 * args.knee
    wrap = ("tests.bench.heap_wrap", str(args.heap.resolve())) if args.heap else ()
    with tempfile.TemporaryDirectory(prefix="farebox-soak-") as tmp:
        with running_stack(Path(tmp), aliases="chat-openai,chat-soak-cached", mutate=soak_config,
                           gateway_wrap=wrap) as stack:
            report = asyncio.run(soak(stack.gateway_url, stack.key, stack.gateway.pid, rate=rate,
                                      minutes=args.minutes, warm_minutes=args.warm_minutes, sample_s=args.sample_s,
                                      mix=parse_mix(args.mix), heap=args.heap))
            if args.heap:
                _await_snapshot(args.heap / "kept.snap")
    if args.heap:
        print("what the gateway kept between the warm-up and the end, by where it was allocated:")
        growth(args.heap / "kept.snap")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"figures written to {out}")
    return 0 if not report["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
