"""The bench run: plans (full, quick), one stack, the closed-loop tables then the open-loop ladder,
then the same (openai only) against a second stack served by ``--workers N``, the JSON report;
``--profile`` runs the gateway under cProfile instead. ``main`` is ``python -m tests.bench.gateway``."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

import aiohttp
import orjson

from tests.bench.gateway import perf, pyspy
from tests.bench.gateway.closed_loop import closed_loop, compare_closed, server_timing, warm
from tests.bench.gateway.dialects import compare_dialects, dialect_errors, dialect_summary
from tests.bench.gateway.open_loop import ADDED_P99_BUDGET_MS, rate_ladder
from tests.bench.gateway.relay_floor import floor_rows
from tests.bench.gateway.report import arm_figures, arms_table, closed_table, rate_header, rate_line, summary_lines
from tests.bench.gateway.stats import CpuMeter, added, thread_cpu
from tests.bench.gateway.surfaces import compare_surfaces, surface_errors, surface_summary
from tests.bench.gateway.targets import PROMPT, Target, new_session, pairs
from tests.bench.gateway.workers_arm import arm_checks, check_lines, group_meter, processes_of, read_log
from tests.harness import ROOT, Stack, generous_limits, running_stack

DESCRIPTION = "What farebox adds to latency: ``python -m tests.bench.gateway`` (``make bench``)."
OUT_JSON = ROOT / "var" / "bench" / "gateway.json"
OUT_PROF = ROOT / "var" / "bench" / "gateway.prof"
OUT_PYSPY = ROOT / "var" / "bench" / "gateway-pyspy.txt"
OUT_PERF = ROOT / "var" / "bench" / "gateway-perf.data"


@dataclass
class Plan:
    levels: dict[int, int]           # concurrency -> requests (per target)
    rates: list[float]
    seconds_per_rate: float
    anthropic: bool = True
    arrivals: str = "poisson"
    surfaces: bool = True  # the surfaces section: chat vs Responses vs Messages on the same alias
    dialects: bool = True  # the dialects section: chat through OpenAI, Azure, Bedrock and Gemini deployments
    responses_store: bool = True  # the Responses requests' store (false: nothing kept, the write's cost out)
    floor: bool = True  # after the ladder, the same rates against a bare aiohttp relay (relay_floor.py)


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


async def run_bench(stack: Stack, plan: Plan, out: Callable[[str], None] = print, *, cpu: CpuMeter | None = None,
                    processes: Callable[[], dict[str, int]] | None = None) -> dict:
    """Closed-loop tables then the ladder against ``stack``. ``cpu`` meters the gateway (default: its one
    process); ``processes`` names the gateway's processes for the by-thread CPU at the end."""
    cpu = cpu or CpuMeter({"gateway": stack.gateway.pid, "simulator": stack.simulator.pid})
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
        report["phases_c1"] = await phases_c1(sessions["gateway"], pairs(stack, False)["openai"][1], out)
        if plan.surfaces:
            report["surfaces"] = await compare_surfaces(stack, {c: n for c, n in plan.levels.items() if c <= 10},
                                                        plan.anthropic, cpu=cpu, out=out, store=plan.responses_store)
        if plan.dialects:
            report["dialects"] = await compare_dialects(stack, {c: n for c, n in plan.levels.items() if c <= 10},
                                                        cpu=cpu, out=out)
        direct, gateway = pairs(stack, False)["openai"]
        out(f"\n== open loop, non-streaming, openai, {plan.arrivals} arrivals, {plan.seconds_per_rate:g} s per rate;"
            f" latency from the scheduled send time; budget: added p99 <= {ADDED_P99_BUDGET_MS:g} ms")
        out(rate_header())
        ladder = await rate_ladder(sessions, direct, gateway, plan.rates, plan.seconds_per_rate, plan.arrivals,
                                   cpu=cpu, on_row=lambda row: out(rate_line(row)))
        out("  (ach = achieved completions/s; lag99 = p99 of how late the client fired vs the schedule: if it grows,"
            " the client is the limit)")
        report["open_loop"] = ladder
        if plan.floor and processes is None:
            ran = {r["rate_rps"]: r["gateway"].get("gateway_cpu_us_per_req") for r in ladder["rows"] if r["gateway"]}
            report["floor"] = await floor_rows(stack, direct, list(ran), plan.seconds_per_rate, plan.arrivals, ran, out)
        if processes is None:
            report["gateway_thread_cpu_s"] = thread_cpu(stack.gateway.pid)
            out(f"  gateway process CPU over the whole run, by thread: {report['gateway_thread_cpu_s']}"
                " (main = event loop; others = event-log writer, to_thread workers)")
        else:
            report["process_thread_cpu_s"] = {name: thread_cpu(pid) for name, pid in processes().items()}
            out(f"  gateway processes' CPU since they started, by thread: {report['process_thread_cpu_s']}"
                " (main = event loop)")
        return report
    finally:
        for s in sessions.values():
            await s.close()


async def phases_c1(session: aiohttp.ClientSession, gateway: Target, out: Callable[[str], None],
                    requests: int = 200) -> dict[str, float]:
    """Where a lone request's time goes in the gateway: one at a time, the medians of its ``Server-Timing``
    (admission, the attempt upstream, the wait for a durable settlement, the gateway's own rest)."""
    timing: list[str] = []
    await closed_loop(session, gateway, stream=False, concurrency=1, requests=requests, timing=timing)
    phases = server_timing(timing)
    out(f"\n== a lone request's time in the gateway (c=1, {requests} non-streamed, medians of Server-Timing, ms): "
        + ", ".join(f"{name} {ms:.3f}" for name, ms in phases.items())
        + " (gateway: its own work, admission included, and its queue; upstream: the hop to the provider and back)")
    return phases


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


def _with_tracing(tree: dict) -> None:
    generous_limits(tree)
    tree["tracing"] = {"enabled": True}  # no otlp_endpoint: spans are built and ended, then dropped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.bench.gateway", description=DESCRIPTION)
    ap.add_argument("--quick", action="store_true", help="small counts, for a smoke run (< 30 s)")
    ap.add_argument("--levels", help="closed-loop levels as concurrency:requests pairs, e.g. 1:300,10:1000 "
                                     "(default 1:600,10:2400,100:3000; quick 1:60,10:200,100:300)")
    ap.add_argument("--rates", help="comma-separated open-loop rates in req/s (default: a ladder 50..4000)")
    ap.add_argument("--seconds-per-rate", type=float, help="open-loop seconds per rate (default 5, quick 1)")
    ap.add_argument("--uniform", action="store_true", help="uniform instead of Poisson arrivals")
    ap.add_argument("--no-anthropic", action="store_true", help="skip the chat-anthropic vs /v1/messages tables")
    ap.add_argument("--no-dialects", action="store_true",
                    help="skip the dialects section (chat through the OpenAI, Azure, Bedrock and Gemini deployments)")
    ap.add_argument("--no-surfaces", action="store_true",
                    help="skip the surfaces section (chat vs Responses vs Messages on the same alias)")
    ap.add_argument("--responses-no-store", action="store_true",
                    help="the surfaces section's Responses requests say store: false (nothing kept)")
    ap.add_argument("--profile", action="store_true",
                    help=f"run the gateway under cProfile for a fixed load, print the top functions, save {OUT_PROF}")
    ap.add_argument("--profile-requests", type=int, default=3000)
    ap.add_argument("--py-spy", dest="py_spy", action="store_true",
                    help=f"sample the gateway with py-spy during the whole run (raw stacks to {OUT_PYSPY}) and print "
                         "its top frames by self and total samples")
    ap.add_argument("--py-spy-native", action="store_true",
                    help="with --py-spy: include native (C) frames (py-spy must pause the gateway for each sample "
                         "to read them: the latency figures of such a run are not comparable)")
    ap.add_argument("--perf", action="store_true",
                    help=f"record the gateway with Linux perf during the whole run ({OUT_PERF}) and print its CPU "
                         "by thread and by library (the interpreter, the kernel, SQLite, ...)")
    ap.add_argument("--json", type=Path, default=OUT_JSON, help="where to write the figures")
    ap.add_argument("--tracing", action="store_true",
                    help="run the gateway with tracing on (every span built, none exported): its cost against a "
                         "run without")
    ap.add_argument("--workers-arm", type=int, default=2, metavar="N",
                    help="after the one-process gateway, measure a second stack served by farebox serve --workers N "
                         "(openai only, same plan; default 2; 0 skips it)")
    ap.add_argument("--no-workers-arm", dest="workers_arm", action="store_const", const=0,
                    help="skip the --workers arm (same as --workers-arm 0)")
    args = ap.parse_args(argv)
    if args.workers_arm == 1 or args.workers_arm < 0:
        ap.error(f"--workers-arm must be 0 (skip) or at least 2, got {args.workers_arm}")
    mutate = _with_tracing if args.tracing else generous_limits

    base = QUICK if args.quick else FULL
    levels = ({int(c): int(n) for c, n in (pair.split(":") for pair in args.levels.split(","))} if args.levels
              else dict(base.levels))
    plan = Plan(levels=levels,
                rates=[float(r) for r in args.rates.split(",")] if args.rates else list(base.rates),
                seconds_per_rate=args.seconds_per_rate or base.seconds_per_rate,
                anthropic=not args.no_anthropic, arrivals="uniform" if args.uniform else "poisson",
                surfaces=not args.no_surfaces, responses_store=not args.responses_no_store,
                dialects=not args.no_dialects)

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
            with running_stack(Path(tmp), gateway_wrap=("cProfile", "-o", str(OUT_PROF), "-m"), mutate=mutate) as stack:
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
        profile = perf_profile = None
        with running_stack(Path(tmp) / "one", mutate=mutate) as stack:
            sampler = pyspy.start(stack.gateway.pid, OUT_PYSPY, args.py_spy_native) if args.py_spy else None
            recorder = perf.start(stack.gateway.pid, OUT_PERF) if args.perf else None
            try:
                with asyncio.Runner(loop_factory=loop_factory) as runner:
                    report = runner.run(run_bench(stack, plan))
            finally:
                if sampler is not None:
                    err = pyspy.finish(sampler)
                    if OUT_PYSPY.exists():
                        profile = pyspy.summarise(OUT_PYSPY)
                    else:
                        print(f"py-spy wrote no profile: {err[-500:]}", file=sys.stderr)
                if recorder is not None:
                    err = perf.finish(recorder)
                    if OUT_PERF.exists():
                        perf_profile = perf.summarise(OUT_PERF, stack.gateway.pid)
                    else:
                        print(f"perf wrote no profile: {err[-500:]}", file=sys.stderr)
            report["gateway_log"] = read_log(stack.folder / "gateway.log")
        workers = None
        if args.workers_arm > 1:
            workers = run_workers_arm(Path(tmp) / "workers", replace(plan, anthropic=False, surfaces=False, dialects=False),
                                      args.workers_arm,
                                      mutate, loop_factory)
    report = {"machine": facts, "plan": asdict(plan), "prompt_bytes": len(PROMPT), "output_tokens": 32,
              "tracing": args.tracing,
              "elapsed_s": round(time.monotonic() - started, 1), **report}
    if profile is not None:
        report["py_spy"] = profile
        for line in pyspy.summary_lines(profile):
            print(line)
        print(f"  raw stacks in {OUT_PYSPY} (py-spy raw format: flamegraph.pl or speedscope read it)")
    if perf_profile is not None:
        report["perf"] = perf_profile
        for line in perf.summary_lines(perf_profile):
            print(line)
        print(f"  samples in {OUT_PERF} (perf report -i {OUT_PERF.relative_to(ROOT)} --sort sym)")
    for line in (summary_lines(report) + surface_summary(report.get("surfaces") or {})
                 + dialect_summary(report.get("dialects") or {})):
        print(line)
    errors = (closed_errors(report) + surface_errors(report.get("surfaces") or {})
              + dialect_errors(report.get("dialects") or {}))
    if workers is not None:
        label = f"--workers {args.workers_arm}"
        report["workers_arm"] = workers
        report["comparison"] = {"1 process": arm_figures(report), label: arm_figures(workers)}
        print(f"\n== summary, {label} arm (openai only)")
        for line in summary_lines(workers)[1:]:
            print(line)
        for line in arms_table(report["comparison"], ADDED_P99_BUDGET_MS) + check_lines(workers["checks"]):
            print(line)
        errors += closed_errors(workers)
    print(f"  closed-loop errors: {errors}; elapsed {report['elapsed_s']} s")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2))
    print(f"figures written to {args.json}")
    return 0


def run_workers_arm(folder: Path, plan: Plan, workers: int, mutate: Callable[[dict], None],
                    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None) -> dict:
    """The same plan against a stack of its own served by ``farebox serve --workers N``; the gateway's CPU is
    the owner's plus every gateway process's."""
    with running_stack(folder, mutate=mutate, serve_args=("--workers", str(workers))) as stack:
        processes = processes_of(stack)
        started = processes()
        print(f"\n==== --workers {workers} arm: a new stack, farebox serve --workers {workers}: {started}")
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            report = runner.run(run_bench(stack, plan, cpu=group_meter(stack, processes), processes=processes))
        report["checks"] = arm_checks(workers, started, processes(), stack.folder / "gateway.log")
    return report


def closed_errors(report: dict) -> int:
    return sum(r[side]["errors"] for kinds in report["closed_loop"].values() for rows in kinds.values()
               for r in rows for side in ("direct", "gateway"))
