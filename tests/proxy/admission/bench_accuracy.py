"""Rate-limit accuracy against a real redis-server, in real time (not part of the test suite).

    .venv/bin/python -m tests.proxy.admission.bench_accuracy [--seconds 20] [--pods 3]

Several "pods" (RedisBuckets instances, each with its own connections, 5 ms timeout) share
one key's bucket; Poisson arrivals offer 2x the limit with random sizes, using the real clock.
Prints tokens admitted per window, counted from the first refusal (the initial burst spent).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

from infra.redis.server import RedisServer
from proxy.limits import BucketSpec
from proxy.limits.redis_buckets import RedisBuckets
from tests.proxy.admission.offered_load import offered


async def run(seconds: float, pods: int, limit: int, window_s: int, seed: int) -> None:
    spec = BucketSpec("bench:key:tpm", limit, window_s)
    with RedisServer() as server:
        fleet = [RedisBuckets.from_url(server.url, pods=pods, timeout_s=0.005) for _ in range(pods)]
        for pod in fleet:
            await pod.start()
        requests = offered(random.Random(seed), limit, window_s, seconds, 2.0, sizes=(10, 400))
        t0 = time.monotonic()
        epoch_us = time.time_ns() // 1000
        admitted: list[tuple[int, int]] = []
        refusals: list[int] = []

        async def send(i: int, at_us: int, tokens: int) -> None:
            await asyncio.sleep(max(0.0, t0 + at_us / 1e6 - time.monotonic()))
            now_us = time.time_ns() // 1000
            got = await fleet[i % pods].reserve([(spec, tokens)], now_us)
            (admitted.append((now_us - epoch_us, tokens)) if got.ok else refusals.append(now_us - epoch_us))

        await asyncio.gather(*(send(i, r.at_us, r.tokens) for i, r in enumerate(requests)))
        first = min(refusals)
        window_us = window_s * 1_000_000
        print(f"{pods} pods, limit {limit} tokens / {window_s} s, offered 2x for {seconds:.0f} s "
              f"({len(requests)} requests), first refusal at {first / 1e6:.1f} s")
        start = first
        while start + window_us <= seconds * 1_000_000:
            tokens = sum(n for at, n in admitted if start <= at < start + window_us)
            print(f"  window from {start / 1e6:5.1f} s: {tokens:6d} tokens ({(tokens - limit) / limit:+.2%})")
            start += window_us
        rest = sum(n for at, n in admitted if at >= first)
        due = limit * (seconds * 1_000_000 - first) / window_us
        print(f"  from first refusal to the end: {rest} tokens vs {due:.0f} refilled ({(rest - due) / due:+.2%})")
        for i, pod in enumerate(fleet):
            print(f"  pod {i} metrics: {pod.metrics}")
            await pod.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--pods", type=int, default=3)
    parser.add_argument("--limit", type=int, default=20_000)
    parser.add_argument("--window", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    asyncio.run(run(args.seconds, args.pods, args.limit, args.window, args.seed))


if __name__ == "__main__":
    main()
