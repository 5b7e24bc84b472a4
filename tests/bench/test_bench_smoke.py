"""The gateway bench's measurement functions still run against a real stack (tiny counts, no timing asserts)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterator

import pytest

from tests.bench import gateway as bench
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
