"""What a bench run measures: ``Level`` (one run at one level against one target, and its
summary), nearest-rank percentiles, and CPU / listen-queue readings from /proc."""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable


def pct(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list, in the list's units."""
    if not sorted_values:
        return float("nan")
    return sorted_values[max(0, min(len(sorted_values) - 1, math.ceil(q * len(sorted_values)) - 1))]


@dataclass
class Level:
    """One run at one level against one target. Latencies in seconds (kept out of the JSON)."""

    target: str
    stream: bool
    requests: int = 0
    errors: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)   # non-stream: total; stream: TTFT (open loop: from schedule)
    totals: list[float] = field(default_factory=list)      # stream only: whole stream
    lags: list[float] = field(default_factory=list)        # open loop: how late the client fired
    error_samples: list[str] = field(default_factory=list)
    cpu_gateway_s: float | None = None
    cpu_simulator_s: float | None = None
    cpu_client_s: float | None = None
    listen_overflows: int | None = None                    # open loop: machine-wide, during the level
    offered: int = 0                                       # open loop: scheduled arrivals
    window_s: float = 0.0                                  # open loop: length of the schedule

    def fail(self, why: str) -> None:
        self.errors += 1
        if len(self.error_samples) < 3:
            self.error_samples.append(why)

    def merge(self, other: "Level") -> None:
        self.requests += other.requests
        self.errors += other.errors
        self.seconds += other.seconds
        self.latencies += other.latencies
        self.totals += other.totals
        self.lags += other.lags
        self.error_samples = (self.error_samples + other.error_samples)[:3]
        for name in ("cpu_gateway_s", "cpu_simulator_s", "cpu_client_s"):
            a, b = getattr(self, name), getattr(other, name)
            setattr(self, name, None if a is None and b is None else (a or 0.0) + (b or 0.0))

    def summary(self) -> dict:
        lat, tot, lag = sorted(self.latencies), sorted(self.totals), sorted(self.lags)
        ms = lambda v: None if math.isnan(v) else round(v * 1000, 3)  # noqa: E731
        out = {
            "requests": self.requests, "ok": len(self.latencies), "errors": self.errors,
            "throughput_rps": round(len(self.latencies) / self.seconds, 1) if self.seconds else 0.0,
            "p50_ms": ms(pct(lat, 0.50)), "p90_ms": ms(pct(lat, 0.90)), "p99_ms": ms(pct(lat, 0.99)),
            "max_ms": ms(lat[-1]) if lat else None,
        }
        if tot:
            out |= {"total_p50_ms": ms(pct(tot, 0.50)), "total_p99_ms": ms(pct(tot, 0.99))}
        if lag:
            out |= {"lag_p50_ms": ms(pct(lag, 0.50)), "lag_p99_ms": ms(pct(lag, 0.99))}
        n = len(self.latencies) or 1
        if self.cpu_gateway_s is not None:
            out["gateway_cpu_us_per_req"] = round(self.cpu_gateway_s / n * 1e6, 1)
        if self.cpu_simulator_s is not None:
            out["simulator_cpu_us_per_req"] = round(self.cpu_simulator_s / n * 1e6, 1)
        if self.cpu_client_s is not None:
            out["client_cpu_us_per_req"] = round(self.cpu_client_s / n * 1e6, 1)
            cores = sum(v or 0.0 for v in (self.cpu_client_s, self.cpu_simulator_s, self.cpu_gateway_s))
            out["cores_busy"] = round(cores / self.seconds, 2) if self.seconds else None
        if self.window_s:
            out["offered_rps"] = round(self.offered / self.window_s, 1)
        if self.listen_overflows is not None:
            out["listen_overflows"] = self.listen_overflows
        if self.error_samples:
            out["error_samples"] = self.error_samples
        return out


class CpuMeter:
    """CPU seconds (user+system) of the gateway and simulator processes, from /proc (Linux only).

    A name maps to one pid or to a function returning the pids of a process group (an owner and its
    gateway processes, read afresh at every reading). A level is charged, per name, the sum over its
    pids of the CPU spent between the two readings; a pid first seen in the second reading was started
    during the level and is charged all its CPU; a pid gone by then is not charged (its CPU is lost).
    """

    def __init__(self, pids: dict[str, int | Callable[[], Iterable[int]]] | None) -> None:
        self.pids = pids or {}
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def read(self) -> dict[str, float]:
        """``client``, and ``name:pid`` for every pid readable now."""
        out = {"client": time.process_time()}
        for name, pids in self.pids.items():
            for pid in [pids] if isinstance(pids, int) else pids():
                seconds = process_cpu(pid, self.tick)
                if seconds is not None:
                    out[f"{name}:{pid}"] = seconds
        return out

    def spent(self, name: str, before: dict[str, float], after: dict[str, float]) -> float | None:
        keys = [k for k in after if k.split(":", 1)[0] == name]
        if not keys or not any(k in before for k in keys):
            return None
        return sum(after[k] - before.get(k, 0.0) for k in keys)

    def charge(self, level: Level, before: dict[str, float]) -> None:
        after = self.read()
        level.cpu_gateway_s = self.spent("gateway", before, after)
        level.cpu_simulator_s = self.spent("simulator", before, after)
        level.cpu_client_s = after["client"] - before["client"]


def process_cpu(pid: int, tick: int) -> float | None:
    """CPU seconds (user+system) ``pid`` has spent so far, or None if it cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick
    except (OSError, IndexError, ValueError):
        return None


NO_CPU = CpuMeter(None)


def listen_counters() -> dict[str, int]:
    """Machine-wide TCP listen-queue overflows/drops (SYNs dropped because an accept backlog was full)."""
    try:
        lines = Path("/proc/net/netstat").read_text().splitlines()
    except OSError:
        return {}
    for head, values in zip(lines[::2], lines[1::2]):
        if head.startswith("TcpExt:"):
            table = dict(zip(head.split()[1:], values.split()[1:]))
            return {k: int(table[k]) for k in ("ListenOverflows", "ListenDrops") if k in table}
    return {}


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds per thread of ``pid`` ("main" is the event loop thread), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        name = "main" if int(tid) == pid else "other threads"
        out[name] = round(out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick, 2)
    return out


def added(g: float | None, d: float | None) -> float | None:
    return None if g is None or d is None else round(g - d, 3)
