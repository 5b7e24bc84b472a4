"""Scanner latency per 4 KB prompt: ``python -m tests.proxy.privacy.bench_scanner`` (``make bench-privacy``).

Prints p50/p99 of ``scan_chat`` over prompts of prose with identifiers, against
the budget (p99 <= 1 ms per 4 KB): wall time, and the thread's CPU time, which a
busy machine's preemption does not inflate (the wall p99 there is scheduling,
not scanning). The garbage collector is paused while timing, as a request's
scan is too short to own a collection. Run by hand; never a timed assertion.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time

from proxy.privacy.scanner import scan_chat
from proxy.snapshot.privacy import DEFAULT_MAX_SCAN_CHARS
from tests.proxy.privacy.prompts import prompt

BUDGET_P99_MS = 1.0


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def measure(samples: int, size: int, identifiers: int, seed: int = 7) -> tuple[list[float], list[float]]:
    rng = random.Random(seed)
    bodies = [{"messages": [{"role": "system", "content": "You are a helpful assistant."},
                            {"role": "user", "content": prompt(rng, size, identifiers)}]} for _ in range(200)]
    for body in bodies:  # warm the regex and phonenumbers metadata
        scan_chat(body, DEFAULT_MAX_SCAN_CHARS)
    wall, cpu = [], []
    gc.disable()
    try:
        for i in range(samples):
            body = bodies[i % len(bodies)]
            w0, c0 = time.perf_counter(), time.thread_time()
            scan_chat(body, DEFAULT_MAX_SCAN_CHARS)
            cpu.append((time.thread_time() - c0) * 1000)
            wall.append((time.perf_counter() - w0) * 1000)
    finally:
        gc.enable()
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=5000)
    args = parser.parse_args()
    print(f"scanner, 4 KB prompts, {args.samples} samples (budget p99 <= {BUDGET_P99_MS} ms)")
    for identifiers in (0, 6, 20):
        wall, cpu = measure(args.samples, 4096, identifiers)
        verdict = "within budget" if _pct(cpu, 0.99) <= BUDGET_P99_MS else "OVER BUDGET"
        print(f"  {identifiers:>2} identifiers: wall p50 {statistics.median(wall):.3f} ms p99 {_pct(wall, 0.99):.3f} ms"
              f" | cpu p50 {statistics.median(cpu):.3f} ms p99 {_pct(cpu, 0.99):.3f} ms ({verdict})")


if __name__ == "__main__":
    main()
