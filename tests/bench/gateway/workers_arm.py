"""The ``--workers N`` arm's own parts: the owner's and its gateway processes' pids (the owner writes
``{state_dir}/workers.json``), a CPU meter that charges the gateway the sum over all of them, and
what the arm's log and pids say went wrong (a restarted process, warnings, tracebacks)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Callable

import yaml

from tests.bench.gateway.stats import CpuMeter
from tests.harness import Stack

WORKERS_FILE = "workers.json"
# warning and error records in json or text format, tracebacks, and the owner's restart notices
_TROUBLE = re.compile(r'"level": ?"(warning|error|critical)"|\b(WARNING|ERROR|CRITICAL)\b|Traceback|exited with')
_REQUEST_ID = re.compile(r'"request_id": ?"req_([0-9a-f]{12})')  # proxy.api.app.new_request_id: per-process prefix
MAX_LOG_SAMPLES = 10


def state_dir(config: Path) -> Path:
    """Where ``farebox serve`` keeps its state for this config (``state_dir``, relative to the config's folder)."""
    tree = yaml.safe_load(config.read_text())
    path = Path(tree.get("state_dir") or "var")
    return path if path.is_absolute() else config.parent / path


def processes_of(stack: Stack) -> Callable[[], dict[str, int]]:
    """A function returning ``{"owner": pid, "gateway 1": pid, ...}`` as they are now (a restarted process
    has a new pid)."""
    pids_file = state_dir(stack.config) / WORKERS_FILE

    def read() -> dict[str, int]:
        try:
            workers = json.loads(pids_file.read_text())
        except (OSError, ValueError):
            workers = {}
        return {"owner": stack.gateway.pid} | {f"gateway {i}": int(workers[i]) for i in sorted(workers, key=int)}

    return read


def group_meter(stack: Stack, processes: Callable[[], dict[str, int]]) -> CpuMeter:
    """CPU of the owner plus every gateway process, charged as the gateway's; the simulator's as usual."""
    return CpuMeter({"gateway": lambda: processes().values(), "simulator": stack.simulator.pid})


def read_log(log: Path, limit: int = MAX_LOG_SAMPLES) -> dict:
    """What a gateway log says: how many lines are warnings, errors, tracebacks or restarts (and the first
    ``limit`` of them), and how many access lines each process wrote (a request id starts with a random
    prefix per process), i.e. how the kernel spread the connections over the processes."""
    count, samples, served = 0, [], Counter()
    try:
        with log.open("r", errors="replace") as f:
            for line in f:
                if '"access"' in line and (m := _REQUEST_ID.search(line)):
                    served[m.group(1)] += 1
                elif _TROUBLE.search(line):
                    count += 1
                    if len(samples) < limit:
                        samples.append(line.rstrip()[:400])
    except OSError as exc:
        return {"lines": None, "samples": [f"cannot read {log}: {exc}"], "requests_by_process": {}}
    return {"lines": count, "samples": samples, "requests_by_process": dict(served.most_common())}


def arm_checks(workers: int, started: dict[str, int], ended: dict[str, int], log: Path) -> dict:
    """What the arm's pids and log say: processes missing or restarted during the run, log trouble."""
    expected = {"owner", *(f"gateway {i}" for i in range(1, workers + 1))}
    return {
        "workers": workers, "pids_at_start": started, "pids_at_end": ended,
        "missing_at_start": sorted(expected - started.keys()),
        "restarted": sorted(name for name, pid in started.items() if ended.get(name) != pid),
        "log": read_log(log),
    }


def check_lines(checks: dict) -> list[str]:
    """The checks as lines to print; empty when all is well."""
    lines = []
    if checks["missing_at_start"]:
        lines.append(f"  PROBLEM: processes not in {WORKERS_FILE} when serving began: {checks['missing_at_start']}")
    if checks["restarted"]:
        lines.append(f"  PROBLEM: processes restarted during the run (pid changed; their CPU before the restart is "
                     f"not counted): {checks['restarted']} {checks['pids_at_start']} -> {checks['pids_at_end']}")
    log = checks["log"]
    served = list(log["requests_by_process"].values())
    lines.append(f"  requests served per gateway process (access lines by request-id prefix): {served or 'none found'}")
    if served and len(served) < checks["workers"]:
        lines.append(f"  NOTE: only {len(served)} of {checks['workers']} gateway processes served requests (the kernel"
                     " spreads connections, not requests: few keep-alive connections can all land on one)")
    if log["lines"]:
        lines.append(f"  PROBLEM: {log['lines']} warning/error/traceback lines in the workers arm's gateway.log;"
                     " the first:")
        lines += [f"    {s}" for s in log["samples"]]
    elif log["lines"] is None:
        lines += [f"  PROBLEM: {s}" for s in log["samples"]]
    return lines
