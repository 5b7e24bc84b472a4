"""Part 2: the worker's consumer lag under an open-loop load of R requests/s (3 events each).

With the worker running, requests start open-loop at ``rate`` per second for
``duration_s`` (a start is never delayed by the worker or by the previous
request): each one's ``request.admitted`` at its start, its attempt and
settlement ``0.3-2.0 s`` later (a streaming request's life), all through the
pods' producer. Every ``sample_s`` the sampler reads the worker group's
committed offsets and the end offsets of the requests and scope-entries
topics: lag (events) = end - committed. Seconds behind = how long ago the
oldest uncommitted record of the topic was written (the end-offset history is
sampled every 0.1 s). Faust commits every second or every 1,000 records, so
about a second's worth of records is the floor of the committed lag.

Drain: from the producer's last acknowledged append until (a) the projection
shows every request settled and (b) the committed offsets reach the ends.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import random
import time

from tests.bench.budget_analysis import dist
from tests.bench.distributed.env import WorkerEnv
from tests.bench.distributed.traffic import Req, Traffic

LIFE_S = (0.3, 2.0)


async def _open_loop(env: WorkerEnv, traffic: Traffic, rate: float, duration_s: float, rng: random.Random) -> dict:
    assert env.log is not None
    started = 0
    finishing: list[tuple[float, int, Req]] = []
    late = []  # how far behind schedule each start was (the producer's own health)
    t0 = time.monotonic()
    while True:
        now = time.monotonic()
        due = min(int((now - t0) * rate), int(duration_s * rate)) - started
        for _ in range(due):
            late.append(now - (t0 + started / rate))
            r = traffic.draw()
            env.log.append(traffic.admitted(r))
            heapq.heappush(finishing, (now + rng.uniform(*LIFE_S), started, r))
            started += 1
        while finishing and finishing[0][0] <= now:
            for event in traffic.finished(heapq.heappop(finishing)[2]):
                env.log.append(event)
        if started >= duration_s * rate and not finishing:
            break
        await asyncio.sleep(0.005)
    await env.log.flush()
    return {"requests": started, "events": 3 * started, "produce_s": round(time.monotonic() - t0, 3),
            "start_late_ms": dist([x * 1000 for x in late])}


async def _sample(env: WorkerEnv, stop: asyncio.Event, sample_s: float, history: dict[str, list[tuple[float, int]]],
                  samples: list[dict]) -> None:
    t_next = time.monotonic()
    while not stop.is_set():
        now = time.monotonic()
        ends = await env.ends()
        for topic, end in ends.items():
            history[topic].append((now, end))
        if now >= t_next:
            t_next += sample_s
            committed = await env.committed()
            row: dict = {"t": now}
            for topic, end in ends.items():
                c = min(committed[topic], end)
                times = [t for t, _ in history[topic]]
                counts = [e for _, e in history[topic]]
                i = bisect.bisect_right(counts, c)  # first sample whose end passed the committed offset
                behind = 0.0 if c >= end or i >= len(times) else now - times[i]
                row[topic] = {"lag": end - c, "behind_s": behind}
            samples.append(row)
        env.check_worker()
        await asyncio.sleep(0.1)


async def run(env: WorkerEnv, traffic: Traffic, rate: float, duration_s: float, *, sample_s: float = 0.5,
              seed: int = 2) -> dict:
    if env.worker is None:
        raise RuntimeError("part 2 needs a running worker")
    await env.wait_caught_up(timeout=120)  # whatever came before is processed
    history: dict[str, list[tuple[float, int]]] = {topic: [] for topic in (env.requests_topic, env.scope_topic,
                                                                          env.rollups_topic)}
    samples: list[dict] = []
    stop = asyncio.Event()
    sampler = asyncio.create_task(_sample(env, stop, sample_s, history, samples))
    try:
        produced = await _open_loop(env, traffic, rate, duration_s, random.Random(seed))
        t_stop = time.monotonic()
        t_projected = await env.wait_caught_up(timeout=300)
        t_committed, ends, committed = await env.wait_committed(timeout=120)
    finally:
        stop.set()
        await sampler
    under_load = [s for s in samples if s["t"] <= t_stop]
    out: dict = {"rate_rps": rate, "duration_s": duration_s, "sample_s": sample_s, **produced,
                 "samples": len(under_load),
                 "drain_projection_s": round(t_projected - t_stop, 3),
                 "drain_committed_s": round(max(t_committed - t_stop, 0), 3),
                 "committed_to_end": all(committed[t] >= ends[t] for t in ends)}
    out["topics"] = {}
    for name, topic in (("requests", env.requests_topic), ("scope_entries", env.scope_topic)):
        out["topics"][name] = {"lag_events": dist([s[topic]["lag"] for s in under_load]),
                     "behind_s": dist([round(s[topic]["behind_s"], 3) for s in under_load])}
    rows = await env.projected()
    out["settled_equals_produced"] = all(rows[t].get("settled") == env.expected.settled[t] for t in rows)
    out["requests_equal_produced"] = all(rows[t].get("requests") == env.expected.requests[t] for t in rows)
    return out


def lines(rep: dict) -> list[str]:
    def d(x: dict, unit: str = "") -> str:
        if x["p50"] is None:
            return "-"
        fmt = (lambda v: f"{v:,.2f}{unit}") if unit else (lambda v: f"{v:,.0f}")
        return f"{fmt(x['p50'])} / {fmt(x['p99'])} / {fmt(x['max'])}"

    late = rep["start_late_ms"]
    out = [
        "",
        f"== 2. consumer lag at {rep['rate_rps']:,.0f} requests/s ({3 * rep['rate_rps']:,.0f} request events/s) "
        f"for {rep['duration_s']:g} s: {rep['requests']:,} requests, {rep['samples']} samples every "
        f"{rep['sample_s']} s",
        f"  producer: done in {rep['produce_s']:.2f} s; starts behind schedule p50/p99/max "
        f"{late['p50']:.1f} / {late['p99']:.1f} / {late['max']:.1f} ms",
        "  lag (end - committed), p50 / p99 / max:",
    ]
    for name in ("requests", "scope_entries"):
        t = rep["topics"][name]
        out.append(f"    {name:<14} {d(t['lag_events']):>26} events   {d(t['behind_s'], ' s'):>26} behind")
    out += [
        f"  drain after the producer stopped: projection complete in {rep['drain_projection_s']:.2f} s, "
        f"committed to the end in {rep['drain_committed_s']:.2f} s (commits every 1 s)",
        f"  projection settled == sum of produced costs: {rep['settled_equals_produced']}; requests counted: "
        f"{rep['requests_equal_produced']}; committed to the end: {rep['committed_to_end']}",
    ]
    return out
