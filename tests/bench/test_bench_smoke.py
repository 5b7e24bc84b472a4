"""The gateway bench's measurement functions still run against a real stack (tiny counts, no timing asserts)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Iterator

import pytest

from tests.bench import gateway as bench
from tests.bench.gateway.relay_floor import floor_rows
from tests.harness import Stack, generous_limits, running_stack

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(Path(tmp_path_factory.mktemp("bench-stack")), mutate=generous_limits) as st:
        yield st


def _numbers(summary: dict, *keys: str) -> None:
    for key in keys:
        value = summary[key]
        assert isinstance(value, float) and math.isfinite(value) and value >= 0, (key, summary)


async def test_closed_loop_both_dialects_stream_and_not(stack: Stack) -> None:
    cpu = bench.CpuMeter({"gateway": stack.gateway.pid, "simulator": stack.simulator.pid})
    sessions = {"direct": bench.new_session(), "gateway": bench.new_session()}
    try:
        for direct, gateway in bench.pairs(stack, anthropic=True).values():
            for stream in (False, True):
                d, g = await bench.compare_closed(sessions, direct, gateway, stream=stream, concurrency=2,
                                                  requests=8, cpu=cpu)
                for level in (d, g):
                    s = level.summary()
                    assert s["errors"] == 0 and s["ok"] == 8, s
                    _numbers(s, "p50_ms", "p99_ms", "throughput_rps")
                    if stream:
                        _numbers(s, "total_p50_ms")
                        assert s["total_p50_ms"] >= s["p50_ms"]
    finally:
        for session in sessions.values():
            await session.close()


async def test_a_lone_requests_phases_come_from_server_timing(stack: Stack) -> None:
    from tests.bench.gateway.run import phases_c1

    session, lines = bench.new_session(), []
    try:
        phases = await phases_c1(session, bench.pairs(stack, anthropic=False)["openai"][1], lines.append, requests=5)
    finally:
        await session.close()
    assert list(phases) == ["admit", "upstream", "durable", "gateway"]
    _numbers(phases, *phases)
    assert "a lone request's time in the gateway" in lines[0]


async def test_open_loop_ladder_and_report(stack: Stack) -> None:
    sessions = {"direct": bench.new_session(), "gateway": bench.new_session()}
    direct, gateway = bench.pairs(stack, anthropic=False)["openai"]
    try:
        ladder = await bench.rate_ladder(sessions, direct, gateway, [40.0], 0.5)
    finally:
        for session in sessions.values():
            await session.close()
    [row] = ladder["rows"]
    for side in ("direct", "gateway"):
        assert row[side]["errors"] == 0 and row[side]["ok"] > 0, row
        _numbers(row[side], "p50_ms", "p99_ms", "lag_p99_ms", "offered_rps")
    assert isinstance(row["added_p99_ms"], float)
    report = {"closed_loop": {}, "open_loop": ladder}
    assert any("knee" in line for line in bench.summary_lines(report))
    assert bench.rate_line(bench.RateRow(40.0, row["direct"], row["gateway"]))
    lines: list[str] = []
    [floor] = await floor_rows(stack, direct, [40.0], 0.5, "poisson", {40.0: 1000.0}, lines.append)
    assert floor["floor"]["errors"] == 0 and floor["floor"]["ok"] > 0, floor  # the relay answered every request
    _numbers(floor, "floor_cpu_us_per_req", "gateway_over_floor")
    assert any("bare aiohttp relay" in line for line in lines) and lines[-1].split()[0] == "40"


async def test_surfaces_section_measures_each_api_on_both_dialects(stack: Stack) -> None:
    from tests.bench.gateway.surfaces import SURFACES, compare_surfaces, surface_errors, surface_summary

    lines: list[str] = []
    report = await compare_surfaces(stack, {1: 8}, True, rounds=2, out=lines.append)
    assert set(report) == {"openai", "anthropic"} and surface_errors(report) == 0, lines
    for kinds in report.values():
        for rows in kinds.values():
            [row] = rows
            for surface in SURFACES:
                assert row[surface]["ok"] == 8, row
                _numbers(row[surface], "p50_ms", "p99_ms")
    assert len(surface_summary(report)) == 4 and any("within" in line for line in surface_summary(report))


def test_percentile_nearest_rank() -> None:
    values = [float(i) for i in range(1, 101)]
    assert bench.pct(values, 0.50) == 50.0
    assert bench.pct(values, 0.99) == 99.0
    assert bench.pct([3.0], 0.99) == 3.0
    assert math.isnan(bench.pct([], 0.5))


def test_pyspy_summary_counts_self_and_total_per_frame(tmp_path: Path) -> None:
    from tests.bench.gateway import pyspy

    raw = tmp_path / "raw.txt"
    raw.write_text("thread (1): MainThread;run (a.py:3);f (b.py:7);g (c.py:9) 6\n"
                   "thread (1): MainThread;run (a.py:3);f (b.py:8) 3\n"
                   "thread (2): writer;loop (d.py:1) 1\n")
    s = pyspy.summarise(raw)
    assert s["samples"] == 10
    assert dict((f, n) for f, n, _ in s["self"]) == {"g (c.py)": 6, "f (b.py)": 3, "loop (d.py)": 1}
    assert dict((f, n) for f, n, _ in s["total"])["run (a.py)"] == 9
    assert dict((f, n) for f, n, _ in s["total"])["f (b.py)"] == 9
    assert any("top" in line for line in pyspy.summary_lines(s))


def test_perf_summary_reads_report_rows_and_folds_threads_into_main_and_the_rest() -> None:
    from tests.bench.gateway import perf

    by_lib = perf.shares("# Samples: 9K of event 'cpu-clock'\n#\n    73.61%  libpython3.11.so.1.0  \n"
                         "    14.25%  [kernel.kallsyms]\n\n     0.10%  libm.so.6\n")
    assert by_lib == [("libpython3.11.so.1.0", 73.61), ("[kernel.kallsyms]", 14.25), ("libm.so.6", 0.1)]
    rows = perf.shares("    86.01%     4276:python \n    12.11%     4278:python \n     0.80%     4284:python \n")
    assert perf.by_thread(rows, 4276) == {"main thread (event loop)": 86.0, "other threads": 12.9}
    lines = perf.summary_lines({"rate_hz": 999, "threads": perf.by_thread(rows, 4276), "libraries": by_lib})
    assert any("libpython3.11.so.1.0" in line for line in lines)


def test_cpu_meter_sums_a_group_and_charges_a_pid_born_during_the_level() -> None:
    meter = bench.CpuMeter({"gateway": lambda: [1, 2]})
    before = {"client": 0.0, "gateway:1": 1.0, "gateway:2": 2.0}
    assert meter.spent("gateway", before, {"client": 0.0, "gateway:1": 1.5, "gateway:2": 2.25}) == 0.75
    # 2 restarted as 3: 3's CPU is all within the level, 2's since ``before`` is lost
    assert meter.spent("gateway", before, {"client": 0.0, "gateway:1": 1.5, "gateway:3": 0.5}) == 1.0
    assert meter.spent("simulator", before, {"client": 0.0}) is None
    live = bench.CpuMeter({"gateway": lambda: [os.getpid(), os.getpid() + 10**9]})  # the second never exists
    assert set(live.read()) == {"client", f"gateway:{os.getpid()}"}


def test_workers_arm_tiny(tmp_path: Path) -> None:
    """The --workers 2 arm end to end at tiny counts: every process found, none restarted, the table printed."""
    plan = bench.Plan(levels={1: 6}, rates=[40.0], seconds_per_rate=0.5, anthropic=False, surfaces=False,
                      dialects=False)  # as the bench runs its arm
    arm = bench.run_workers_arm(tmp_path / "workers", plan, 2, generous_limits, None)
    checks = arm["checks"]
    assert set(checks["pids_at_start"]) == {"owner", "gateway 1", "gateway 2"}, checks
    assert not checks["missing_at_start"] and not checks["restarted"], checks
    assert checks["log"]["lines"] == 0, checks["log"]["samples"]  # the lines themselves, not a truncated dict
    assert 1 <= len(checks["log"]["requests_by_process"]) <= 2, checks  # access lines found, by process
    assert set(arm["process_thread_cpu_s"]) == {"owner", "gateway 1", "gateway 2"}
    [row] = arm["closed_loop"]["openai"]["non_streaming"]
    assert row["direct"]["errors"] == 0 and row["gateway"]["errors"] == 0, row
    _numbers(row["gateway"], "p50_ms", "gateway_cpu_us_per_req")
    assert arm["open_loop"]["rows"][0]["gateway"]["errors"] == 0, arm["open_loop"]
    figures = bench.arm_figures(arm)
    assert figures["c1_added_p50_ms"] is not None and figures["c1_stream_ttft_added_p50_ms"] is not None
    lines = bench.arms_table({"1 process": figures, "--workers 2": figures}, bench.ADDED_P99_BUDGET_MS)
    assert any("knee" in line for line in lines) and "--workers 2" in lines[1]
