"""Batch beside interactive traffic: ``python -m tests.bench.batch`` (``make bench-batch``).

One stack (the simulator with instant answers, a real ``farebox serve`` as served: overload protection on),
``chat-openai``'s deployment held to a tight provider limit (``--limit-rpm``, the mirror at 100%), key limits
and budgets out of the way. Interactive traffic is the bench's usual request (non-streaming chat, a 4 KB
prompt) fired open-loop at ``--rate`` for ``--seconds`` by the Go client of ``make bench-overload``
(``tests/bench/loadgen``), every latency from the scheduled time:

1. direct: the simulator itself at the same rate (the floor of this sitting);
2. alone: the gateway with no batch;
3. beside: the same schedule, a ``--lines``-line batch (short tagging requests on the same alias, so the same
   deployment and its limit) created just before it starts; then the batch is followed to its end;
4. alone again, once the batch has ended: the same gateway, later in its life (a longer event log, the archiver's
   passes): what the sitting itself moves between two runs without a batch.

Printed and written to ``var/bench/batch.json``: interactive p50/p99 alone and beside a batch, their ratio
(the bar: p99 beside within 10% of the mean of the two runs without a batch, which bracket it), interactive requests not answered 200 beside the batch (the bar:
none), the batch's lines queued when the interactive run ended, and its time to finish against the least the
limit allows (``lines / (limit - interactive rate)``). ``--runs 3`` for medians, each run on a fresh stack.
Figures, never assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import openai

from tests.batch_lines import tagging_batch
from tests.bench.gateway.targets import pairs
from tests.bench.overload import build_loadgen, fire
from tests.harness import ROOT, generous_limits, running_stack

OUT_JSON = ROOT / "var" / "bench" / "batch.json"


def config(limit_rpm: int, batches: dict):
    def mutate(tree: dict) -> None:
        generous_limits(tree)
        tree["batches"] = dict(batches)
        for dep in tree["deployments"]:
            if dep["id"] == "sim-openai-mumbai":
                dep["limits"] = {"rpm": limit_rpm, "input_tpm": 100_000_000, "output_tpm": 100_000_000}
        tree["rate_limits"]["deployment_mirror_pct"] = 100
        tree["server"].pop("overload", None)  # as served: the door's defaults

    return mutate


async def measure(stack, args: argparse.Namespace, out) -> dict:
    (direct, gateway), = [pairs(stack, False)["openai"]]
    bodies = {}
    for target in (direct, gateway):
        bodies[target.name] = stack.folder / f"body-{target.name}.json"
        bodies[target.name].write_bytes(target.body)
    client = openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key, max_retries=2)
    await fire(gateway, bodies["gateway"], args.rate, 3, 99, args.timeout)  # warm up
    d = (await fire(direct, bodies["direct"], args.rate, args.seconds, 1, args.timeout)).summary()
    await asyncio.sleep(1.0)
    alone = (await fire(gateway, bodies["gateway"], args.rate, args.seconds, 1, args.timeout)).summary()
    await asyncio.sleep(1.0)
    uploaded = await asyncio.to_thread(client.files.create, file=("bench.jsonl", io.BytesIO(tagging_batch(args.lines))),
                                       purpose="batch")
    started = time.monotonic()
    batch = await asyncio.to_thread(client.batches.create, input_file_id=uploaded.id,
                                    endpoint="/v1/chat/completions", completion_window="24h")
    beside = (await fire(gateway, bodies["gateway"], args.rate, args.seconds, 1, args.timeout)).summary()
    during = await asyncio.to_thread(client.batches.retrieve, batch.id)
    queued = during.request_counts.total - during.request_counts.completed - during.request_counts.failed
    while during.status in ("in_progress", "cancelling") and time.monotonic() - started < args.wait:
        await asyncio.sleep(0.5)
        during = await asyncio.to_thread(client.batches.retrieve, batch.id)
    took = time.monotonic() - started
    await asyncio.sleep(1.0)
    again = (await fire(gateway, bodies["gateway"], args.rate, args.seconds, 1, args.timeout)).summary()
    alones = [x["ok_p99_ms"] for x in (alone, again) if x["ok_p99_ms"]]
    bracket = statistics.mean(alones) if alones else None
    floor_s = args.lines / max(args.limit_rpm / 60 - args.rate, 1e-9)
    not_ok = beside["offered"] - beside["ok"]
    figures = {
        "direct_p99_ms": d["ok_p99_ms"], "alone_p50_ms": alone["ok_p50_ms"], "alone_p99_ms": alone["ok_p99_ms"],
        "beside_p50_ms": beside["ok_p50_ms"], "beside_p99_ms": beside["ok_p99_ms"],
        "beside_p99_over_alone": round(beside["ok_p99_ms"] / alone["ok_p99_ms"], 3)
        if beside["ok_p99_ms"] and alone["ok_p99_ms"] else None,
        "beside_p50_over_alone": round(beside["ok_p50_ms"] / alone["ok_p50_ms"], 3)
        if beside["ok_p50_ms"] and alone["ok_p50_ms"] else None,
        "alone_again_p99_ms": again["ok_p99_ms"],
        "alone_again_over_alone": round(again["ok_p99_ms"] / alone["ok_p99_ms"], 3)
        if again["ok_p99_ms"] and alone["ok_p99_ms"] else None,
        "beside_p99_over_alone_runs": round(beside["ok_p99_ms"] / bracket, 3) if beside["ok_p99_ms"] and bracket
        else None,
        "interactive_not_ok_beside": not_ok, "interactive_refused_beside": beside["refused"],
        "interactive_errors_beside": beside["errors"], "interactive_timeouts_beside": beside["timeouts"],
        "batch_lines_queued_at_end_of_interactive_run": queued, "batch_status": during.status,
        "batch_completed": during.request_counts.completed, "batch_failed": during.request_counts.failed,
        "batch_seconds": round(took, 1), "batch_seconds_least_the_limit_allows": round(floor_s, 1),
        "batch_seconds_over_least": round(took / floor_s, 2),
    }
    for name, value in figures.items():
        out(f"  {name:<46} {value}")
    out("  (bars: beside_p99_over_alone_runs <= 1.10 (beside against the mean of the alone runs before it and after the"
        " batch); interactive_not_ok_beside 0; the batch completed in its window)")
    client.close()
    return {"direct": d, "alone": alone, "beside": beside, "alone_again": again, "figures": figures}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate", type=float, default=50.0, help="interactive requests per second")
    ap.add_argument("--seconds", type=float, default=60.0, help="length of each interactive run")
    ap.add_argument("--lines", type=int, default=5000, help="lines in the batch")
    ap.add_argument("--limit-rpm", type=int, default=9000, help="the deployment's provider limit, requests/min")
    ap.add_argument("--wait", type=float, default=900.0, help="how long to follow the batch after it starts, s")
    ap.add_argument("--timeout", type=float, default=10.0, help="the client's timeout per request, s")
    ap.add_argument("--runs", type=int, default=1, help="repeat on fresh stacks; medians of the figures")
    ap.add_argument("--json", type=Path, default=OUT_JSON)
    ap.add_argument("--concurrency", type=int, default=None, help="batches.concurrency (default: the gateway's)")
    ap.add_argument("--cpu-ceiling", type=float, default=None, help="batches.cpu_ceiling (default: the gateway's)")
    ap.add_argument("--cpu-ceiling-beside", type=float, default=None,
                    help="batches.cpu_ceiling_beside (default: the gateway's)")
    args = ap.parse_args(argv)
    import uvloop

    batches = {k: v for k, v in (("concurrency", args.concurrency), ("cpu_ceiling", args.cpu_ceiling),
                                 ("cpu_ceiling_beside", args.cpu_ceiling_beside)) if v is not None}
    build_loadgen()
    runs = []
    for n in range(args.runs):
        print(f"\n==== run {n + 1} of {args.runs} (load {os.getloadavg()[0]:.2f})")
        with tempfile.TemporaryDirectory(prefix="farebox-batch-") as tmp:
            with running_stack(Path(tmp), aliases="chat-openai", mutate=config(args.limit_rpm, batches)) as stack:
                runs.append(uvloop.run(measure(stack, args, print)))
    figures = [r["figures"] for r in runs]
    medians = {k: statistics.median(f[k] for f in figures if isinstance(f[k], (int, float)))
               for k in figures[0] if any(isinstance(f[k], (int, float)) for f in figures)}
    if args.runs > 1:
        print(f"\n==== medians of {len(figures)} runs")
        for name, value in medians.items():
            print(f"  {name:<46} {value}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"runs": runs, "medians": medians, "loadavg_end": os.getloadavg()}, indent=1))
    print(f"\nwritten to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
