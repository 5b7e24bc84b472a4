"""The distributed benchmark: ``python -m tests.bench.distributed`` (``make bench-distributed``).

Four parts, each selectable with ``--part`` (repeatable; default all), on a
real Kafka broker (Maven jars), real Redis and real ``farebox worker``
processes:

1. ``throughput``: request events/s one worker sustains (goal >= 5,000);
   when below the goal, a second run under py-spy says where the time goes;
2. ``lag``: the worker's consumer lag under 1,000 requests/s, open loop;
3. ``leases``: lease round trip p50/p99, sequential and concurrent;
4. ``early-stop``: how early a team is stopped with 3 pods (unused budget at
   the first refusal), and no overshoot beyond recorded overrun.

Parts 1-3 share one worker (part 1 starts it after pre-producing its events;
the others wait for it to have processed everything before them). Figures go
to ``var/bench/distributed.json``. Exit 1 when a correctness fact fails
(money, counts, overshoot), never for a slow figure: timings on a shared
2-core machine are reported, not judged.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import yaml

from infra.redis.server import RedisServer
from tests.bench.budget_plan import Prices, prices_from_config
from tests.bench.distributed import early_stop, lag, leases, throughput
from tests.bench.distributed.env import WorkerEnv
from tests.bench.distributed.traffic import Traffic
from tests.bench.output import finish
from tests.harness import EXAMPLES, ROOT
from tests.infra.kafka.support import session_broker

OUT_JSON = ROOT / "var" / "bench" / "distributed.json"
PARTS = ("throughput", "lag", "leases", "early-stop")


async def worker_parts(folder: Path, bootstrap: str, redis_url: str, args: argparse.Namespace, parts: list[str],
                       prices: Prices, out: dict) -> None:
    env = WorkerEnv(folder, bootstrap, redis_url)
    await env.open()
    try:
        traffic = Traffic(prices, env.expected, seed=args.seed)
        if "throughput" in parts:
            out["throughput"] = await throughput.run(env, traffic, args.requests)
            _print(throughput.lines(out["throughput"]))
        else:  # warm: the worker up and one request through, so later parts do not time its start
            env.start_worker()
            for event in traffic.batch(1):
                assert env.log is not None
                env.log.append(event)
            await env.wait_caught_up(timeout=120)
        if "lag" in parts:
            out["lag"] = await lag.run(env, traffic, args.rate, args.duration, seed=args.seed)
            _print(lag.lines(out["lag"]))
        if "leases" in parts:
            out["leases"] = await leases.run(env, args.leases, args.concurrent, args.concurrency)
            _print(leases.lines(out["leases"]))
    finally:
        await env.close()


async def profiled(folder: Path, bootstrap: str, redis_url: str, n: int, prices: Prices, seed: int) -> dict:
    env = WorkerEnv(folder, bootstrap, redis_url)
    await env.open()
    try:
        return await throughput.run(env, Traffic(prices, env.expected, seed=seed), n, profile=folder / "py-spy.txt")
    finally:
        await env.close()


def _print(lines: list[str]) -> None:
    for line in lines:
        print(line, flush=True)


def verdict(rep: dict) -> list[str]:
    """Correctness facts only (timings are never judged)."""
    bad = []
    for part in ("throughput", "lag"):
        r = rep.get(part)
        if r and not (r["settled_equals_produced"] and r["requests_equal_produced"] and r["committed_to_end"]):
            bad.append(f"{part}: projection or committed offsets disagree with what was produced")
    r = rep.get("leases")
    if r and not (r["all_answered_once"] and r["grants_cover_need"] and not any(r["leased_at_end"].values())):
        bad.append(f"leases: answered once {r['all_answered_once']}, cover need {r['grants_cover_need']}, "
                   f"leased at end {r['leased_at_end']}")
    r = rep.get("early_stop")
    if r:
        if r["overshoot_beyond_overrun_micro"] or r["eventlog"]["peak_excess_beyond_overrun_micro"]:
            bad.append("early-stop: the team went over its limit beyond recorded overrun")
        if r["other_errors"] or r["cost_mismatches"] or not r["projection_settled_equals_events"]:
            bad.append(f"early-stop: {r['other_errors']} errors, {r['cost_mismatches']} cost mismatches, "
                       f"projection == events {r['projection_settled_equals_events']}")
        if r["eventlog"]["admitted"] != r["eventlog"]["settled"] + r["eventlog"]["expired"]:
            bad.append(f"early-stop: holds left open {r['eventlog']}")
    return bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", action="append", choices=PARTS, help="run only this part (repeatable; default all)")
    ap.add_argument("--requests", type=int, default=6000, help="1: requests pre-produced (3 events each)")
    ap.add_argument("--profile", choices=("auto", "always", "never"), default="auto",
                    help="1: a second run under py-spy: when below the goal (auto), always, or never")
    ap.add_argument("--rate", type=float, default=1000.0, help="2: requests/s, open loop")
    ap.add_argument("--duration", type=float, default=20.0, help="2: seconds of load")
    ap.add_argument("--leases", type=int, default=300, help="3: sequential round trips")
    ap.add_argument("--concurrent", type=int, default=300, help="3: round trips with --concurrency pods at once")
    ap.add_argument("--concurrency", type=int, default=8, help="3: pods asking at once")
    ap.add_argument("--burst", type=int, default=600, help="4: streaming requests fired at once over 3 pods")
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--json", type=Path, default=OUT_JSON, help="where to write the figures")
    args = ap.parse_args(argv)
    parts = args.part or list(PARTS)
    tree = yaml.safe_load((EXAMPLES / "farebox.yaml").read_text())
    prices = prices_from_config(tree, datetime.now(timezone.utc))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    started = time.monotonic()
    print(f"farebox distributed bench: parts {', '.join(parts)}; {cores} usable cores, load average "
          f"{os.getloadavg()[0]:.2f} (figures on a shared machine are pessimistic)", flush=True)
    broker = session_broker()
    rep: dict = {"parts": parts, "args": {k: str(v) for k, v in vars(args).items()}, "cores": cores,
                 "load_average_start": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="farebox-bench-dist-") as tmp:
        folder = Path(tmp)
        if set(parts) & {"throughput", "lag", "leases"}:
            server = RedisServer().start()
            try:
                asyncio.run(worker_parts(folder / "worker", broker.bootstrap, server.url, args, parts, prices, rep))
            finally:
                server.cleanup()
        t = rep.get("throughput")
        if t and (args.profile == "always" or (args.profile == "auto" and
                                               t["request_events_per_s"] < t["goal_events_per_s"])):
            print("\n(part 1 again, the worker under py-spy, to see where its time goes)", flush=True)
            server = RedisServer().start()
            try:
                prof = asyncio.run(profiled(folder / "profiled", broker.bootstrap, server.url,
                                            args.requests, prices, args.seed))
            finally:
                server.cleanup()
            spy = prof.get("profile") or {}
            if "raw" in spy:  # the samples outlive the temp folder, next to the figures
                keep = args.json.with_name(f"{args.json.stem}-py-spy.txt")
                keep.parent.mkdir(parents=True, exist_ok=True)
                keep.write_text(Path(spy["raw"]).read_text())
                spy["raw"] = str(keep)
            rep["throughput_profiled"] = prof
            _print(throughput.lines(prof))
        if "early-stop" in parts:
            server = RedisServer().start()
            try:
                rep["early_stop"] = early_stop.run(folder / "cluster", broker.bootstrap, server.url, prices,
                                                   args.burst, args.seed)
            finally:
                server.cleanup()
            _print(early_stop.lines(rep["early_stop"]))
    rep["elapsed_s"] = round(time.monotonic() - started, 1)
    rep["load_average_end"] = os.getloadavg()
    print()
    return finish(rep, verdict(rep), args.json,
                  "correctness: counts, balances and overshoot all as required (timings are reported, never judged)")


if __name__ == "__main__":
    sys.exit(main())
