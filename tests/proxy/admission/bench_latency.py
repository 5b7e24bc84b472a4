"""Reserve latency, p50/p99, for MemoryBuckets and RedisBuckets (not part of the test suite).

    .venv/bin/python -m tests.proxy.admission.bench_latency

Each reserve takes three buckets (key RPM, key input TPM, team TPM), as admission will.
Redis runs on a throwaway local redis-server; "concurrent" keeps 50 reserves in flight;
"busy loop" adds a task standing for other requests' CPU work, holding the loop 10 ms (twice
the timeout) at each step it gets, with no backoff (every call tries Redis, none is answered
locally only because an earlier one was): what matters there is how many calls timed out
although Redis was healthy (on a loaded machine Redis itself sometimes is not scheduled for
over 5 ms, so a few are real).
"""

from __future__ import annotations

import asyncio
import statistics
import time

from infra.redis.server import RedisServer
from proxy.limits import BucketSpec, MemoryBuckets
from proxy.limits.redis_buckets import RedisBuckets

ITEMS = [
    (BucketSpec("k1:rpm", 10**6), 1),
    (BucketSpec("k1:itpm", 10**8), 1500),
    (BucketSpec("team1:tpm", 10**8), 2500),
]


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1e6


def show(name: str, samples: list[float]) -> None:
    print(f"{name:44s} n={len(samples):6d}  p50 {pct(samples, 0.5):7.1f} us  "
          f"p99 {pct(samples, 0.99):7.1f} us  mean {statistics.fmean(samples) * 1e6:7.1f} us")


async def sequential(buckets, n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        await buckets.reserve(ITEMS, time.time_ns() // 1000)
        out.append(time.perf_counter() - start)
    return out


async def concurrent(buckets, n: int, in_flight: int) -> list[float]:
    out: list[float] = []

    async def worker(count: int) -> None:
        for _ in range(count):
            start = time.perf_counter()
            await buckets.reserve(ITEMS, time.time_ns() // 1000)
            out.append(time.perf_counter() - start)

    await asyncio.gather(*(worker(n // in_flight) for _ in range(in_flight)))
    return out


async def busy(run, block_s: float = 0.010) -> list[float]:
    stop = asyncio.Event()

    async def hog() -> None:
        while not stop.is_set():
            time.sleep(block_s)
            await asyncio.sleep(0)

    task = asyncio.ensure_future(hog())
    try:
        return await run
    finally:
        stop.set()
        await task


def show_metrics(buckets: RedisBuckets, calls: int | None = None) -> None:
    pipe = getattr(buckets, "pipe", None)
    batching = f", {pipe.calls / max(pipe.writes, 1):.1f} calls per write" if pipe is not None else ""
    print(f"  metrics after: {buckets.metrics}{batching}")
    if calls is not None:
        m = buckets.metrics  # a call that timed out is also answered locally: it counts in both
        tried = calls - m["redis_fallback_total"] + m["redis_errors_total"]
        print(f"  timed out against a healthy Redis: {m['redis_errors_total']} of {tried} calls tried")


async def main() -> None:
    memory = MemoryBuckets()
    await sequential(memory, 2000)
    show("memory, sequential", await sequential(memory, 50_000))
    with RedisServer() as server:
        shared = RedisBuckets.from_url(server.url, pods=3, timeout_s=0.005)
        await shared.start()
        await sequential(shared, 500)
        show("redis (5 ms timeout), sequential", await sequential(shared, 10_000))
        show("redis (5 ms timeout), 50 in flight", await concurrent(shared, 20_000, 50))
        show_metrics(shared)
        await shared.close()
        loaded = RedisBuckets.from_url(server.url, pods=3, timeout_s=0.005, backoff_s=0.0, max_backoff_s=0.0)
        await loaded.start()
        show("redis (5 ms timeout), busy loop, sequential", await busy(sequential(loaded, 300)))
        show("redis (5 ms timeout), busy loop, 50 in flight", await busy(concurrent(loaded, 5_000, 50)))
        show_metrics(loaded, 5_300)
        await loaded.close()
        patient = RedisBuckets.from_url(server.url, pods=3, timeout_s=1.0)
        await patient.start()
        show("redis (1 s timeout), 50 in flight", await concurrent(patient, 20_000, 50))
        show("redis (1 s timeout), 200 in flight", await concurrent(patient, 20_000, 200))
        await patient.close()
        down = RedisBuckets.from_url(server.url, pods=3, timeout_s=0.005, backoff_s=0.05)
        await down.start()
        server.pause()
        show("redis paused: local fallback, sequential", await sequential(down, 5_000))
        show_metrics(down)
        server.resume()
        await down.close()


if __name__ == "__main__":
    asyncio.run(main())
