"""Printing: the closed-loop tables, the open-loop ladder lines and the summary."""

from __future__ import annotations

import math

from tests.bench.gateway.open_loop import RateRow, saturated


def fmt(v: float | None, width: int = 7, prec: int = 2) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-".rjust(width)
    return f"{v:{width}.{prec}f}"


def ratio(g: float | None, d: float | None) -> str:
    return f"{g / d:5.2f}x" if d and g is not None else "    -"


def closed_table(title: str, metric: str, rows: list[dict]) -> str:
    lines = [title,
             f"{'conc':>5} {'n':>6} | {'direct p50':>10} {'p99':>7} | {'gateway p50':>11} {'p99':>7} | "
             f"{'added p50':>9} {'p99':>7} | {'ratio p50':>9} {'p99':>6} | {'rps d/g':>11} | "
             f"{'cpu us/req cli/sim/gw':>21} {'cores':>5} | {'errors d/g':>10}",
             ]
    for r in rows:
        d, g = r["direct"], r["gateway"]
        mark = "  <-- ERRORS" if d["errors"] or g["errors"] else ""
        lines.append(
            f"{r['concurrency']:>5} {d['requests']:>6} | {fmt(d['p50_ms'], 10)} {fmt(d['p99_ms'])} | "
            f"{fmt(g['p50_ms'], 11)} {fmt(g['p99_ms'])} | {fmt(r['added_p50_ms'], 9)} {fmt(r['added_p99_ms'])} | "
            f"{ratio(g['p50_ms'], d['p50_ms']):>9} {ratio(g['p99_ms'], d['p99_ms']):>6} | "
            f"{d['throughput_rps']:>5.0f}/{g['throughput_rps']:<5.0f} | "
            f"{cpu_cell(g)} | {d['errors']:>4}/{g['errors']:<5}{mark}")
    lines.append(f"  ({metric}; ms; cpu = CPU per request of client, simulator, gateway during the gateway runs;"
                 f" cores = cores busy in total)")
    return "\n".join(lines)


def cpu_cell(s: dict) -> str:
    parts = [fmt(s.get(k), 5, 0).strip() for k in ("client_cpu_us_per_req", "simulator_cpu_us_per_req",
                                                     "gateway_cpu_us_per_req")]
    return f"{'/'.join(parts):>21} {fmt(s.get('cores_busy'), 5)}"


def rate_header() -> str:
    return (f"{'rate':>6} | {'direct ach':>10} {'p50':>6} {'p99':>7} {'lag99':>6} {'err':>4} | "
            f"{'gateway ach':>11} {'p50':>6} {'p99':>7} {'lag99':>6} {'err':>4} | {'added p50':>9} {'p99':>7} "
            f"{'ratio p99':>9} | {'cpu us/req cli/sim/gw':>21} {'cores':>5}")


def rate_line(row: RateRow) -> str:
    d, g = row.direct, row.gateway
    left = (f"{row.rate:>6.0f} | {d['throughput_rps']:>10.0f} {fmt(d['p50_ms'], 6)} {fmt(d['p99_ms'])} "
            f"{fmt(d.get('lag_p99_ms'), 6)} {d['errors']:>4} | ")
    why = saturated(d, row.rate)
    notes = [f"{side} listen-queue overflows {s['listen_overflows']}" for side, s in (("direct", d), ("gateway", g))
             if s and s.get("listen_overflows")]
    if why:
        notes.append(f"direct saturated: {why}")
    if g is None:
        return left + f"{'(gateway ladder stopped)':>40}" + "".join(f"   {n}" for n in notes)
    mark = "" if row.gateway_ok else "  <-- over budget" if not (g["errors"] or d["errors"]) else "  <-- ERRORS"
    return (left + f"{g['throughput_rps']:>11.0f} {fmt(g['p50_ms'], 6)} {fmt(g['p99_ms'])} "
            f"{fmt(g.get('lag_p99_ms'), 6)} {g['errors']:>4} | {fmt(row.added_p50, 9)} {fmt(row.added_p99)} "
            f"{ratio(g['p99_ms'], d['p99_ms']):>9} | {cpu_cell(g)}{mark}" + "".join(f"   {n}" for n in notes))


def summary_lines(report: dict) -> list[str]:
    lines = ["\n== summary"]
    for dialect, kinds in report["closed_loop"].items():
        for kind, rows in kinds.items():
            parts = [f"c={r['concurrency']}: {fmt(r['added_p50_ms'], 0)}/{fmt(r['added_p99_ms'], 0)} ms" for r in rows]
            label = "TTFT" if kind == "streaming" else "latency"
            lines.append(f"  {dialect:<9} {kind:<13} added {label} p50/p99  " + "   ".join(parts))
            one = next((r for r in rows if r["concurrency"] == 1), None)
            if one is not None:  # less load-sensitive on a shared box than the added milliseconds
                d, g = one["direct"], one["gateway"]
                lines.append(f"  {'':<9} {'':<13} c=1 gateway/direct p50 {ratio(g['p50_ms'], d['p50_ms']).strip()}"
                             f" p99 {ratio(g['p99_ms'], d['p99_ms']).strip()}; gateway CPU"
                             f" {fmt(g.get('gateway_cpu_us_per_req'), 0, 0)} us/req")
    ladder = report.get("open_loop")
    if ladder:
        knee = ladder["knee_rps"]
        lines.append(f"  knee (highest rate with gateway added p99 <= {ladder['budget_added_p99_ms']:g} ms, no errors): "
                     + (f"{knee:g} req/s" if knee is not None else "none of the rates tried"))
        if ladder["direct_saturated_at_rps"] is not None:
            lines.append(f"  direct run saturates at {ladder['direct_saturated_at_rps']:g} req/s "
                         f"({ladder['direct_saturation_reason']}): the client+simulator ceiling")
        else:
            lines.append(f"  direct run did not saturate up to {ladder['direct_max_rate_tried_rps']:g} req/s")
        if knee is not None and ladder["direct_saturated_at_rps"] is not None:
            limit = "the gateway" if knee < ladder["direct_saturated_at_rps"] else "the client/simulator"
            lines.append(f"  -> the knee is set by {limit}")
    return lines



def _c1(report: dict, kind: str) -> dict | None:
    rows = report["closed_loop"].get("openai", {}).get(kind, [])
    return next((r for r in rows if r["concurrency"] == 1), None)


def arm_figures(report: dict) -> dict:
    """One arm's figures for the side-by-side table (None where its plan did not measure them)."""
    plain, stream = _c1(report, "non_streaming"), _c1(report, "streaming")
    ladder = report.get("open_loop") or {}
    knee = ladder.get("knee_rps")
    at_knee = next((r for r in ladder.get("rows", []) if r["rate_rps"] == knee), None)
    return {
        "direct_ceiling_rps": ladder.get("direct_saturated_at_rps"),
        "direct_max_rate_tried_rps": ladder.get("direct_max_rate_tried_rps"),
        "c1_added_p50_ms": plain and plain["added_p50_ms"], "c1_added_p99_ms": plain and plain["added_p99_ms"],
        "c1_stream_ttft_added_p50_ms": stream and stream["added_p50_ms"],
        "knee_rps": knee,
        "c1_gateway_cpu_us_per_req": plain and plain["gateway"].get("gateway_cpu_us_per_req"),
        "knee_gateway_cpu_us_per_req": at_knee and at_knee["gateway"].get("gateway_cpu_us_per_req"),
    }


def arms_table(figures: dict[str, dict], budget_ms: float) -> list[str]:
    """The arms side by side: one column per arm (``figures``: arm label -> ``arm_figures``)."""
    def ceiling(f: dict) -> str:
        if f["direct_ceiling_rps"] is not None:
            return f"{f['direct_ceiling_rps']:g}"
        tried = f["direct_max_rate_tried_rps"]
        return f">{tried:g}" if tried is not None else "-"

    def pair(a: float | None, b: float | None) -> str:
        return f"{fmt(a, 0)}/{fmt(b, 0)}"

    rows = [
        ("direct arm ceiling (req/s)", ceiling),
        ("added latency p50/p99, c=1 (ms)", lambda f: pair(f["c1_added_p50_ms"], f["c1_added_p99_ms"])),
        ("stream TTFT added p50, c=1 (ms)", lambda f: fmt(f["c1_stream_ttft_added_p50_ms"], 0)),
        (f"knee, added p99 <= {budget_ms:g} ms (req/s)",
         lambda f: f"{f['knee_rps']:g}" if f["knee_rps"] is not None else "none"),
        ("gateway CPU per request, c=1 (us)", lambda f: fmt(f["c1_gateway_cpu_us_per_req"], 0, 0)),
        ("gateway CPU per request, at the knee (us)", lambda f: fmt(f["knee_gateway_cpu_us_per_req"], 0, 0)),
    ]
    width = max(14, *(len(label) for label in figures))
    lines = ["\n== one process vs --workers (openai, non-streaming unless said; each arm against its own direct runs;"
             " CPU of every gateway process, owner included)",
             f"  {'':<42}" + "".join(f" {label:>{width}}" for label in figures)]
    for name, cell in rows:
        lines.append(f"  {name:<42}" + "".join(f" {cell(f):>{width}}" for f in figures.values()))
    return lines
