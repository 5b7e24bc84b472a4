"""``--perf``: where the gateway's CPU goes below Python, by thread and by library, from Linux ``perf record``
on the gateway's pid while the bench drives it.

py-spy (``--py-spy``) names Python functions; this names what runs underneath them: the interpreter itself
(``libpython``), the kernel (socket I/O, fsync, thread switches), SQLite, uvloop, orjson. When the interpreter
holds most of the CPU and no native library stands out, every cut is a Python-level one, and a compiler's
speed-up over the pure-Python parts bounds what such cuts can reach. perf samples on-CPU time only (an idle
thread is not sampled) at ``PERF_HZ``; ``summarise`` reads ``perf report``'s per-thread and per-library tables.
The main thread is the one whose id is the process id (the event loop); the others are the event-log writer
and the executors' threads.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.bench.gateway.pyspy import finish  # noqa: F401 - SIGINT, then wait: perf writes its file as py-spy does

PERF_HZ = 999


def perf_binary() -> str | None:
    return shutil.which("perf")


def start(pid: int, out: Path) -> subprocess.Popen:
    """Start ``perf record`` on every thread of ``pid`` into ``out``; stop it with ``finish`` (shared with ``pyspy``)."""
    binary = perf_binary()
    if binary is None:
        raise RuntimeError("perf is not installed (the linux-perf package)")
    out.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([binary, "record", "-F", str(PERF_HZ), "-p", str(pid), "-o", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def shares(report: str) -> list[tuple[str, float]]:
    """``perf report --stdio`` rows as (name, percent), in its order; comment and blank lines skipped."""
    rows = []
    for line in report.splitlines():
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        pct, _, name = text.partition("%")
        try:
            rows.append((name.strip(), float(pct)))
        except ValueError:
            continue
    return rows


def by_thread(rows: list[tuple[str, float]], pid: int) -> dict[str, float]:
    """``--sort pid`` rows (``tid:comm``) folded into the main thread (tid == pid) and the rest."""
    out = {"main thread (event loop)": 0.0, "other threads": 0.0}
    for name, pct in rows:
        tid = name.split(":", 1)[0]
        out["main thread (event loop)" if tid == str(pid) else "other threads"] += pct
    return {k: round(v, 1) for k, v in out.items()}


def summarise(data: Path, pid: int, top: int = 12) -> dict:
    """The shares of the gateway's sampled CPU by thread and by library (``perf report`` over ``data``)."""
    def report(sort: str) -> str:
        return subprocess.run(["perf", "report", "-i", str(data), "--stdio", "--sort", sort],
                              capture_output=True, text=True, check=True).stdout
    libraries = [(name, round(pct, 2)) for name, pct in shares(report("dso"))[:top]]
    return {"rate_hz": PERF_HZ, "threads": by_thread(shares(report("pid")), pid), "libraries": libraries}


def summary_lines(summary: dict) -> list[str]:
    lines = [f"\n== gateway perf profile: on-CPU samples at {summary['rate_hz']} Hz, every thread",
             "  by thread: " + ", ".join(f"{k} {v}%" for k, v in summary["threads"].items()),
             "  by library:"]
    lines += [f"    {pct:5.1f}%  {name}" for name, pct in summary["libraries"]]
    return lines
