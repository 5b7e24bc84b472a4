"""Past the knee: ``python -m tests.bench.overload`` (``make bench-overload``).

One stack (the simulator with instant answers, a real ``farebox serve`` with
its default overload protection; limits far above the load) driven open-loop
by a small Go client (``tests/bench/loadgen``, built on the first run: a Python
client at these rates takes most of a core of the two and measures itself),
non-streaming chat, seeded Poisson arrivals fired on schedule whatever the
completions, every latency from the scheduled time (no coordinated omission):

1. the ladder: the gateway at rising rates (``--seconds-per-rate`` each), the
   simulator directly at the same rates in the same sitting; the **knee** is
   the highest rate (every rung below it clean too) the gateway served with no
   error or timeout, at most 1% refused, 95% of the offered rate achieved and
   its p99 within 5x the first rung's (20 ms at least): where it stops keeping
   up, whether it then queues (shedding off) or refuses (on);
2. below the knee: half the knee for ``--seconds`` (the reference p99);
3. past it: twice the knee for ``--seconds`` (60 by default), the direct run
   beside it. Each answer is sorted: admitted (200), refused (503 or 529 with
   ``Retry-After``: the overload refusal), other errors, client timeouts
   (``--timeout``, 10 s).

The figures the issue asks for are printed and written to
``var/bench/overload.json``: the admitted p99 at 2x against the reference p99
(the bar: at most 5x), the refusals' p99 (at most 5 ms), the count of client
timeouts (none), the gateway's achieved throughput; every latency also as a
ratio to the direct run's. Repeat with ``--runs 3`` for medians. Figures,
never assertions: this is a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tests.bench.gateway.stats import CpuMeter, pct
from tests.bench.gateway.targets import Target, pairs
from tests.harness import ROOT, generous_limits, running_stack


def as_served(tree: dict) -> None:
    """The stack's config as ``farebox serve`` defaults it: limits out of the way, overload protection on."""
    generous_limits(tree)
    tree["server"]["overload"] = dict(OVERLOAD)

OUT_JSON = ROOT / "var" / "bench" / "overload.json"
RATES = [100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1100, 1200, 1400, 1600]
KNEE_P99_MS = 20.0  # a rung is clean with its p99 within max(this, KNEE_P99_TIMES x the first rung's p99)
KNEE_P99_TIMES = 5
OVERLOAD: dict = {}  # server.overload for the run (--no-shedding: enabled false): the defaults otherwise


@dataclass
class Run:
    """One open-loop run against one target, every answer sorted by kind."""

    offered: int = 0
    seconds: float = 0.0
    ok: list[float] = field(default_factory=list)  # latency (s) of 200s
    refused: list[float] = field(default_factory=list)  # latency of 503/529 with Retry-After
    refused_without_retry_after: int = 0
    errors: int = 0
    timeouts: int = 0
    late: list[float] = field(default_factory=list)  # how late the client fired
    samples: list[str] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict:
        ok, refused, late = sorted(self.ok), sorted(self.refused), sorted(self.late)
        ms = lambda v: None if v != v else round(v * 1000, 2)  # noqa: E731 - nan -> None
        out = {"offered": self.offered, "ok": len(ok), "refused": len(refused),
               "refused_without_retry_after": self.refused_without_retry_after, "errors": self.errors,
               "timeouts": self.timeouts, "achieved_ok_rps": round(len(ok) / self.seconds, 1) if self.seconds else 0,
               "ok_p50_ms": ms(pct(ok, .5)), "ok_p99_ms": ms(pct(ok, .99)), "ok_max_ms": ms(ok[-1]) if ok else None,
               "refused_p50_ms": ms(pct(refused, .5)), "refused_p99_ms": ms(pct(refused, .99)),
               "client_late_p99_ms": ms(pct(late, .99)), "error_samples": self.samples}
        if self.cpu.get("gateway") is not None and self.seconds:
            out["gateway_cores_busy"] = round(self.cpu["gateway"] / self.seconds, 2)
        return out


LOADGEN_SRC = Path(__file__).resolve().parent / "loadgen"
LOADGEN = ROOT / "var" / "bench" / "loadgen"


def build_loadgen() -> Path:
    """``go build`` the open-loop client (tests/bench/loadgen, standard library only) into var/bench."""
    LOADGEN.parent.mkdir(parents=True, exist_ok=True)
    go = shutil.which("go") or "/usr/local/go/bin/go"  # where this machine's Go lives when not on PATH
    try:
        subprocess.run([go, "build", "-o", str(LOADGEN), "."], cwd=LOADGEN_SRC, check=True,
                       env={**os.environ, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"})
    except (OSError, subprocess.CalledProcessError) as exc:
        raise SystemExit(f"bench-overload needs Go to build its client (tests/bench/loadgen): {exc}") from None
    return LOADGEN


async def fire(target: Target, body_file: Path, rate: float, seconds: float, seed: int, timeout: float,
               cpu: CpuMeter | None = None) -> Run:
    """The Go client fires ``target`` open-loop at ``rate`` for ``seconds``; its answers sorted into a Run."""
    headers = [arg for name, value in target.headers.items() for arg in ("-H", f"{name}: {value}")]
    before = cpu.read() if cpu else {}
    proc = await asyncio.create_subprocess_exec(
        str(LOADGEN), "-url", target.url, "-body", str(body_file), "-rate", str(rate), "-seconds", str(seconds),
        "-seed", str(seed), "-timeout", f"{timeout}s", *headers,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"loadgen failed ({proc.returncode}): {err.decode()[-500:]}")
    got = json.loads(out)
    ms = lambda values: [v / 1000 for v in values or ()]  # noqa: E731 - the Run keeps seconds
    run = Run(offered=got["offered"], seconds=seconds, ok=ms(got["ok_ms"]), refused=ms(got["refused_ms"]),
              refused_without_retry_after=got["refused_without_retry_after"], errors=got["errors"],
              timeouts=got["timeouts"], late=ms(got["late_ms"]), samples=got["error_samples"] or [])
    if cpu:
        run.cpu = {"gateway": cpu.spent("gateway", before, cpu.read())}
    return run


async def measure(stack, args: argparse.Namespace, out) -> dict:
    (direct, gateway), = [pairs(stack, False)["openai"]]
    bodies = {}
    for target in (direct, gateway):
        bodies[target.name] = stack.folder / f"body-{target.name}.json"
        bodies[target.name].write_bytes(target.body)
    cpu = CpuMeter({"gateway": stack.gateway.pid})
    report: dict = {"ladder": []}

    async def both(rate: float, seconds: float, seed: int) -> tuple[dict, dict]:
        d = await fire(direct, bodies["direct"], rate, seconds, seed, args.timeout)
        await asyncio.sleep(0.3)
        g = await fire(gateway, bodies["gateway"], rate, seconds, seed, args.timeout, cpu)
        await asyncio.sleep(2.0)  # let an overloaded gateway drain before the next run
        return d.summary(), g.summary()

    await fire(gateway, bodies["gateway"], 100, 2, 99, args.timeout)
    knee, broken, floor = None, False, None
    out(f"{'rate':>6} | {'direct p50/p99 ms':>18} | {'gateway ok/s':>12} {'p50':>7} {'p99':>8} {'refused':>8} "
        f"{'errors':>6} {'timeouts':>8} {'refused p99':>11}")
    for i, rate in enumerate(args.rates):
        d, g = await both(rate, args.seconds_per_rate, i)
        report["ladder"].append({"rate": rate, "direct": d, "gateway": g})
        out(f"{rate:>6} | {d['ok_p50_ms']!s:>8} / {d['ok_p99_ms']!s:>7} | {g['achieved_ok_rps']:>12} "
            f"{g['ok_p50_ms']!s:>7} {g['ok_p99_ms']!s:>8} {g['refused']:>8} {g['errors']:>6} {g['timeouts']:>8} {g['refused_p99_ms']!s:>11}")
        floor = floor or g["ok_p99_ms"]
        bound = max(KNEE_P99_MS, KNEE_P99_TIMES * (floor or 0))
        clean = (g["refused"] <= 0.01 * g["offered"] and not g["errors"] and not g["timeouts"]
                 and g["ok"] >= 0.95 * g["offered"] and (g["ok_p99_ms"] or 1e9) <= bound)
        if not clean:
            if not args.ladder_only:
                break
            broken = True
        if clean and not broken:
            knee = rate
    if args.ladder_only:
        return report
    if knee is None:
        out("no rate of the ladder was served cleanly: no knee")
        return report
    report["knee_rps"] = knee
    out(f"\nknee: {knee} req/s. Below it ({knee // 2} req/s) and past it ({2 * knee} req/s), "
        f"{args.seconds:g} s each:")
    below_d, below_g = await both(knee / 2, args.seconds, 101)
    past_d, past_g = await both(2 * knee, args.seconds, 102)
    report |= {"below": {"rate": knee / 2, "direct": below_d, "gateway": below_g},
               "past": {"rate": 2 * knee, "direct": past_d, "gateway": past_g}}
    ref = below_g["ok_p99_ms"]
    admitted = past_g["ok_p99_ms"]
    report["figures"] = figures = {
        "knee_rps": knee, "reference_p99_ms": ref, "admitted_p99_ms": admitted,
        "admitted_p99_over_reference": round(admitted / ref, 2) if ref and admitted else None,
        "admitted_share": round(past_g["ok"] / past_g["offered"], 3) if past_g["offered"] else None,
        "refused_p99_ms": past_g["refused_p99_ms"], "timeouts": past_g["timeouts"],
        "errors": past_g["errors"], "direct_p99_at_2x_ms": past_d["ok_p99_ms"],
        "admitted_p99_over_direct": round(admitted / past_d["ok_p99_ms"], 2)
        if admitted and past_d["ok_p99_ms"] else None,
        "gateway_cores_busy_at_2x": past_g.get("gateway_cores_busy")}
    for name, value in figures.items():
        out(f"  {name:<30} {value}")
    out("  (bars: admitted_p99_over_reference <= 5; refused_p99_ms <= 5; timeouts 0)")
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="length of the below- and past-the-knee runs")
    ap.add_argument("--seconds-per-rate", type=float, default=5.0)
    ap.add_argument("--rates", type=lambda s: [int(x) for x in s.split(",")], default=RATES)
    ap.add_argument("--timeout", type=float, default=10.0, help="the client's timeout per request, s")
    ap.add_argument("--runs", type=int, default=1, help="repeat on fresh stacks; medians of the figures")
    ap.add_argument("--serve-args", default="", help="extra farebox serve arguments, e.g. '--workers 2'")
    ap.add_argument("--ladder-only", action="store_true", help="the whole ladder, no stop at the knee, no 2x run")
    ap.add_argument("--json", type=Path, default=OUT_JSON)
    ap.add_argument("--target", type=float, default=None, help="server.overload.target_utilisation (default: "
                    "the gateway's own default)")
    ap.add_argument("--no-shedding", action="store_true", help="server.overload.enabled false: the gateway "
                    "admits everything (up to max_in_flight), to compare")
    args = ap.parse_args(argv)
    import uvloop

    build_loadgen()

    OVERLOAD.clear()
    if args.no_shedding:
        OVERLOAD["enabled"] = False
    if args.target is not None:
        OVERLOAD["target_utilisation"] = args.target

    runs = []
    for n in range(args.runs):
        print(f"\n==== run {n + 1} of {args.runs} (load {os.getloadavg()[0]:.2f})")
        with tempfile.TemporaryDirectory(prefix="farebox-overload-") as tmp:
            with running_stack(Path(tmp), mutate=as_served, serve_args=tuple(args.serve_args.split())) as stack:
                runs.append(uvloop.run(measure(stack, args, print)))
    figures = [r["figures"] for r in runs if "figures" in r]
    medians = {k: statistics.median(f[k] for f in figures if f[k] is not None)
               for k in (figures[0] if figures else {}) if any(f[k] is not None for f in figures)}
    if args.runs > 1 and medians:
        print(f"\n==== medians of {len(figures)} runs")
        for name, value in medians.items():
            print(f"  {name:<30} {value}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"runs": runs, "medians": medians, "loadavg_end": os.getloadavg()}, indent=1))
    print(f"\nwritten to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
