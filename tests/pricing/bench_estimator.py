"""Cost of the input-token estimator on the admission hot path.

    .venv/bin/python tests/pricing/bench_estimator.py [--calls N]

Measures, per call of ``Estimator.estimate`` on a ~4 KB chat prompt
(1 system + 3 messages): p50 / p99 / mean in microseconds for o200k, cl100k
and the calibrated chars fallback. The exact paths are run both "cold" (every
body's strings are new, so every string is tokenized) and "warm" (the same
conversation resent, so long strings hit the count memo, as in agent loops).
Also: first-call time (encoder load) in a fresh process, the RSS it adds,
``Calibrator.observe`` cost, and how exact counting scales with prompt size.
Not collected by pytest (no ``test_`` prefix).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pricing import tokenizer
from pricing.calibration import Calibrator, Estimator
from pricing.tokenizer import CL100K_BASE, O200K_BASE

WORDS = (
    "the gateway admits a request only when every budget scope it touches can hold the worst case "
    "cost estimate before any upstream byte is sent so tokens must be counted quickly and exactly "
    "customer invoice shipment refund policy order status delivery window warehouse inventory "
    "please summarise explain compare the following report quarterly revenue growth margin churn "
    "function returns value error handling retry timeout latency throughput percentile service"
).split()


def _text(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    size = 0
    while size < chars:
        sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 16)))
        sentence = sentence[0].upper() + sentence[1:] + rng.choice([". ", ", and ", "? ", ".\n"])
        out.append(sentence)
        size += len(sentence)
    return "".join(out)[:chars]


def chat_body(seed: int, total_chars: int = 4096) -> dict:
    """1 system + user/assistant/user, about ``total_chars`` characters of text."""
    rng = random.Random(seed)
    shares = (0.25, 0.35, 0.25, 0.15)
    roles = ("system", "user", "assistant", "user")
    return {
        "model": "gpt-4o",
        "messages": [{"role": r, "content": _text(rng, int(total_chars * s))} for r, s in zip(roles, shares)],
    }


def _percentiles(samples_ns: list[int]) -> dict[str, float]:
    ordered = sorted(samples_ns)
    n = len(ordered)
    return {
        "p50_us": ordered[n // 2] / 1e3,
        "p99_us": ordered[min(n - 1, int(n * 0.99))] / 1e3,
        "mean_us": sum(ordered) / n / 1e3,
    }


def bench_estimate(estimator: Estimator, bodies: list[dict], encoding: str | None, calls: int) -> dict[str, float]:
    samples: list[int] = []
    clock = time.perf_counter_ns
    family = None if encoding else "claude"
    for i in range(calls):
        body = bodies[i % len(bodies)]
        t0 = clock()
        estimator.estimate(body, key_id="key-1", model_family=family, encoding=encoding)
        samples.append(clock() - t0)
    return _percentiles(samples)


def first_call(encoding: str) -> dict[str, float]:
    """Fresh interpreter: import + first exact count (encoder load), and the RSS it adds."""
    code = f"""
import json, resource, sys, time
sys.path.insert(0, {str(ROOT)!r})
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
from pricing.tokenizer import count_chat_input
t1 = time.perf_counter()
count_chat_input({{"messages": [{{"role": "user", "content": "hello world"}}]}}, {encoding!r})
t2 = time.perf_counter()
count_chat_input({{"messages": [{{"role": "user", "content": "hello again"}}]}}, {encoding!r})
t3 = time.perf_counter()
rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({{"import_ms": (t1 - t0) * 1e3, "first_call_ms": (t2 - t1) * 1e3,
                  "second_call_us": (t3 - t2) * 1e6, "rss_added_mb": (rss1 - rss0) / 1024}}))
"""
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120)
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20_000)
    args = parser.parse_args()
    calls = args.calls

    results: dict[str, object] = {}
    for encoding in (O200K_BASE, CL100K_BASE):
        results[f"first_call[{encoding}]"] = first_call(encoding)

    tokenizer.preload()
    sample = chat_body(0)
    results["prompt"] = {
        "chars": sum(len(m["content"]) for m in sample["messages"]),
        "o200k_tokens": tokenizer.count_chat_input(sample, O200K_BASE),
        "cl100k_tokens": tokenizer.count_chat_input(sample, CL100K_BASE),
        "chars_estimate": Estimator().estimate(sample, key_id="k").tokens,
    }

    cold_bodies = [chat_body(seed) for seed in range(calls)]  # every string new
    warm_bodies = [chat_body(seed) for seed in range(8)]  # a few conversations resent
    for encoding in (O200K_BASE, CL100K_BASE):
        tokenizer.configure_cache()
        results[f"exact[{encoding}] cold"] = bench_estimate(Estimator(), cold_bodies, encoding, calls)
        tokenizer.configure_cache()
        results[f"exact[{encoding}] warm"] = bench_estimate(Estimator(), warm_bodies, encoding, calls)
        tokenizer.configure_cache(max_chars=0)
        results[f"exact[{encoding}] no-memo"] = bench_estimate(Estimator(), warm_bodies, encoding, calls)
    tokenizer.configure_cache()

    calibrated = Estimator(Calibrator())
    calibrated.calibrator.observe("key-1", "claude", 1000, 1200)
    results["chars (calibrated)"] = bench_estimate(calibrated, cold_bodies, None, calls)

    cal = Calibrator(max_entries=10_000)
    samples = []
    for i in range(calls):
        t0 = time.perf_counter_ns()
        cal.observe(f"key-{i % 20_000}", "claude", 1000, 1100 + i % 300)
        samples.append(time.perf_counter_ns() - t0)
    results["Calibrator.observe (LRU churning)"] = _percentiles(samples)

    tokenizer.configure_cache(max_chars=0)
    scaling = {}
    for size in (1_024, 16_384, 131_072, 1_048_576):
        body = chat_body(size, size)
        t0 = time.perf_counter()
        tokenizer.count_chat_input(body, O200K_BASE)
        scaling[f"{size // 1024}KB"] = round((time.perf_counter() - t0) * 1e3, 3)
    results["o200k cold ms by prompt size"] = scaling
    tokenizer.configure_cache()

    width = max(len(k) for k in results)
    for name, value in results.items():
        if isinstance(value, dict):
            shown = "  ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in value.items())
        else:
            shown = str(value)
        print(f"{name:<{width}}  {shown}")


if __name__ == "__main__":
    main()
