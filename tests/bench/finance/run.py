"""The finance bench's command line: generate (or reuse) the month, measure, print, save."""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.bench.finance.measure import archive_throughput, focus_export_time, request_table, showback_times
from tests.bench.finance.measure_connectors import reconcile_connectors
from tests.bench.finance.measure_reconcile import reconcile_time
from tests.bench.finance.measure_rerate import CHANGED, rerate_time
from tests.bench.finance.synthetic import DAYS, MONTH, generate, price_book
from tests.bench.output import finish
from tests.harness import ROOT

OUT = ROOT / "var" / "bench"
CONNECTORS = ("openai", "anthropic", "aws", "google", "azure")
GOALS = {"archive_events_per_s": 50_000, "showback_s": 2.0, "rerate_s": 60.0}
GENERATOR = 3  # 3: files listed in the manifest; bump when synthetic.py changes what it writes: a kept month of another generator is made again


def month_archive(folder: Path, events: int, days: int = DAYS) -> dict[str, Any]:
    """The synthetic month under ``folder`` (generated once per size; a marker file records what is there)."""
    marker = folder / "generated.json"
    if marker.exists():
        made = json.loads(marker.read_text())
        if (made.get("asked"), made.get("days"), made.get("generator")) == (events, days, GENERATOR):
            return {**made, "reused": True}
    shutil.rmtree(folder, ignore_errors=True)
    started = time.perf_counter()
    made = {"asked": events, "days": days, "generator": GENERATOR, **generate(folder / "archive", events, days=days)}
    made["generate_s"] = round(time.perf_counter() - started, 1)
    marker.write_text(json.dumps(made))
    return {**made, "reused": False}


def archive_line(writer: dict[str, Any]) -> str:
    n = writer["decode_processes"]
    pooled = (f"{writer['pooled_events_per_s']:,} events/s as `farebox archiver` runs here (checked, {n} decode "
              f"processes; pool started in {writer['pool_start_s']} s); embedded log {writer['embedded_events_per_s']:,} "
              f"events/s in the archiver child alone, {writer['embedded_backlog_events_per_s']:,} with {n} decode "
              f"processes (a backlog)" if n else "no decode pool on one core")
    return (f"archive throughput (ArchiveWriter, {writer['events']:,} real events, median of {writer['runs']}): "
            f"{pooled}; ArchiveWriter in one process: {writer['checked_events_per_s']:,} events/s checked, "
            f"{writer['trusted_events_per_s']:,} trusted (goal >= {GOALS['archive_events_per_s']:,})")


def archive_only(events: int, path: Path, started: float) -> int:
    """``--part archive``: the ArchiveWriter throughput alone, without the month."""
    with tempfile.TemporaryDirectory() as tmp:
        rep: dict[str, Any] = {"archive_writer": archive_throughput(Path(tmp) / "writer", events)}
    rep["goals"] = GOALS
    rep["elapsed_s"] = round(time.monotonic() - started, 1)
    print(archive_line(rep["archive_writer"]))
    print(f"archive size per million events: {rep['archive_writer']['mb_per_million_events']:.1f} MB (real writer)")
    return finish(rep, [], path, "archive part only: nothing to cross-check")


def report(rep: dict[str, Any]) -> list[str]:
    month, writer, show, focus, rr = rep["month"], rep["archive_writer"], rep["showback"], rep["focus"], rep["rerate"]
    rc = rep["reconcile"]
    table = rep["request_table"]
    per_million = month["bytes"] / month["events"] * 1_000_000 / 1e6
    how = "reused" if month["reused"] else f"generated in {month['generate_s']} s"
    lines = [
        f"synthetic month {MONTH}: {month['events']:,} events, {month['requests']:,} requests, {month['files']} files, "
        f"{month['bytes'] / 1e6:,.1f} MB ({how})",
        archive_line(writer),
        "per-request table: " + (f"built in {table['seconds']} s, {table['mb']} MB" if table["built"]
                                 else f"reused, {table['mb']} MB"),
        f"archive size per million events: {writer['mb_per_million_events']:.1f} MB (real writer), "
        f"{per_million:.1f} MB (synthetic month)",
        f"warehouse open: {show['open_s']} s; showback {MONTH} by team (median of {show['runs']}, "
        f"{'per-request table' if show['request_table'] else 'raw events'}): {show['by_team_cold_s']} s cold, "
        f"{show['by_team_warm_s']} s warm (goal < {GOALS['showback_s']} s), {show['by_team_rows']} rows; "
        f"by team,app,alias,model: {show['by_team_app_alias_model_s']} s, {show['by_team_app_alias_model_rows']} rows",
        "FOCUS export (one run): " + (f"{focus['seconds']} s" if focus["measured"]
                                      else f"not measured: {focus['why']}"),
        f"re-rating the month in DuckDB ({CHANGED} output +10%): {rr['seconds']} s (goal <= {GOALS['rerate_s']:g} s), "
        f"{rr['requests']:,} requests, {rr['attempts']:,} attempts re-priced, {rr['corrections']:,} would be "
        f"corrected, {sum(rr['left_alone'].values()):,} left alone (not settled or inconsistent), "
        f"net {rr['diff_micro']:,} micro-units",
        f"one day's reconciliation ({rc['day']}, simulator usage export): exact export {rc['exact']['seconds']} s, "
        f"{rc['exact']['rows']:,} rows compared, {rc['exact']['flagged']:,} flagged; export x{rc['scaled']['factor']} "
        f"{rc['scaled']['seconds']} s, {rc['scaled']['flagged']:,} of {rc['scaled']['rows']:,} rows flagged at "
        f"{rc['scaled']['flagged_pct_min']}-{rc['scaled']['flagged_pct_max']}%",
    ]
    cx = rep.get("connectors")
    if cx:
        lines.append(f"one day's reconciliation per export connector ({cx['day']}, {cx['attempts']:,} attempts, "
                     f"parse + our side + report, median of 3): " + "; ".join(
                         f"{name} {cx[name]['seconds']} s ({cx[name]['rows']} rows, {cx[name]['flagged']} flagged)"
                         for name in CONNECTORS))
    if "raw_cold_s" in show:
        lines.append(f"showback by team cold over the raw events (one run): {show['raw_cold_s']} s, same balances: "
                     f"{show['raw_agrees']}")
    return lines


def problems(rep: dict[str, Any], asked: int) -> list[str]:
    out = []
    if rep["showback"].get("raw_agrees") is False:
        out.append("scope_balances through the per-request table differ from the raw events")
    if not rep["showback"]["daily_cost_agrees"]:
        out.append("daily_cost does not add up to the month's requests")
    rr = rep["rerate"]
    if rr["requests"] != rr["admitted"]:
        out.append(f"re-rating accounted for {rr['requests']} requests of the {rr['admitted']} admitted")
    if rr["moved"] != [CHANGED]:
        out.append(f"re-rating moved the cost of {rr['moved']}, expected only {CHANGED}")
    rc = rep["reconcile"]
    if not rc["exact"]["rows"] or rc["exact"]["flagged"]:
        out.append(f"reconciling {rc['day']} against its exact export flagged {rc['exact']['flagged']} of "
                   f"{rc['exact']['rows']} rows, expected 0 of some")
    if rc["scaled"]["flagged"] != rc["scaled"]["rows"] or not 2.5 <= (rc["scaled"]["flagged_pct_min"] or 0) <= (
            rc["scaled"]["flagged_pct_max"] or 0) <= 3.5:
        out.append(f"reconciling {rc['day']} against its export x{rc['scaled']['factor']} flagged "
                   f"{rc['scaled']['flagged']} of {rc['scaled']['rows']} rows at {rc['scaled']['flagged_pct_min']}-"
                   f"{rc['scaled']['flagged_pct_max']}%, expected every row at about 3%")
    for name in CONNECTORS if rep.get("connectors") else ():
        got = rep["connectors"][name]
        if not got["rows"] or got["flagged"]:
            out.append(f"reconciling {rep['connectors']['day']} against its exact {name} export flagged "
                       f"{got['flagged']} of {got['rows']} rows, expected 0 of some")
    if abs(rep["month"]["events"] - asked) > asked * 0.05 + 100:
        out.append(f"generated {rep['month']['events']} events, asked {asked}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="The finance warehouse at the scale of a month.")
    ap.add_argument("--events", type=int, default=10_000_000, help="events in the synthetic month (default 10M)")
    ap.add_argument("--days", type=int, default=DAYS, help="days of the month to spread them over (default 30)")
    ap.add_argument("--writer-events", type=int, default=60_000, help="real events through ArchiveWriter")
    ap.add_argument("--folder", type=Path, default=None, help="where the month is kept (default var/bench/finance)")
    ap.add_argument("--raw-cold", action="store_true", help="also time showback cold over the raw events (slow)")
    ap.add_argument("--skip-focus", action="store_true", help="do not time the FOCUS export")
    ap.add_argument("--json", type=Path, default=None,
                    help="where to write the figures (default var/bench/finance.json; finance-archive.json for "
                         "--part archive)")
    ap.add_argument("--part", choices=("all", "archive"), default="all",
                    help="archive: only the ArchiveWriter throughput (no month generated)")
    args = ap.parse_args(argv)
    started = time.monotonic()
    if args.part == "archive":
        return archive_only(args.writer_events, args.json or OUT / "finance-archive.json", started)
    folder = args.folder or OUT / "finance"
    rep: dict[str, Any] = {"month": month_archive(folder, args.events, args.days)}
    with tempfile.TemporaryDirectory() as tmp:
        rep["archive_writer"] = archive_throughput(Path(tmp) / "writer", args.writer_events)
        rep["request_table"] = request_table(folder / "archive")
        rep["showback"] = showback_times(folder / "archive", MONTH, raw_cold=args.raw_cold)
        rep["focus"] = ({"measured": False, "why": "--skip-focus"} if args.skip_focus else
                        focus_export_time(folder / "archive", MONTH, Path(tmp) / "focus", *price_book()))
    rep["rerate"] = rerate_time(folder / "archive", *price_book())
    rep["reconcile"] = reconcile_time(folder / "archive", *price_book())
    rep["connectors"] = reconcile_connectors(folder / "archive", *price_book())
    rep["goals"] = GOALS
    rep["elapsed_s"] = round(time.monotonic() - started, 1)
    for line in report(rep):
        print(line)
    return finish(rep, problems(rep, args.events), args.json or OUT / "finance.json", "all figures consistent")
