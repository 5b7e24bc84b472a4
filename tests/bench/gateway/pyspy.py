"""``--py-spy``: sample the gateway process with py-spy while the bench drives it, and summarise
where its CPU goes (top frames by self and by total samples).

py-spy attaches to the running gateway by pid (``--nonblocking``, so sampling does not pause the
event loop and the latency figures stay close to an unprofiled run; idle stacks are left out, so
every sample is the process doing work). Native frames cannot be read without pausing the process,
so ``native`` sampling drops ``--nonblocking`` (py-spy refuses the two together). It writes py-spy's raw format (one collapsed stack and
its count per line); ``summarise`` reads that file: a frame's *self* count is the samples where it
was the innermost frame, its *total* the samples where it was anywhere on the stack (counted once
per stack even if it recurses).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

PYSPY_RATE_HZ = 250


def pyspy_binary() -> str | None:
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.exists() else shutil.which("py-spy")


def start(pid: int, out: Path, native: bool = False) -> subprocess.Popen:
    """Start sampling ``pid`` into ``out`` (raw collapsed stacks); stop with ``finish``."""
    binary = pyspy_binary()
    if binary is None:
        raise RuntimeError("py-spy is not installed (it is in the test extra: make install)")
    out.parent.mkdir(parents=True, exist_ok=True)
    args = [binary, "record", "--pid", str(pid), "--format", "raw", "--output", str(out),
            "--rate", str(PYSPY_RATE_HZ), "--threads"] + ([] if native else ["--nonblocking"])
    if native:
        args.append("--native")
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen, timeout: float = 30.0) -> str:
    """Stop the sampler (SIGINT makes py-spy write its file) and return what it printed on stderr."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return (err or b"").decode(errors="replace")


def _frames(stack: str) -> list[str]:
    # raw format: "thread (0x..);frame (file:line);frame ... count"; keep frames, drop line numbers
    parts = stack.split(";")
    if parts and parts[0].startswith(("thread ", "process ")):
        parts = parts[1:]
    out = []
    for p in parts:
        name, _, where = p.partition(" (")
        file = where.rsplit(":", 1)[0].rstrip(")")
        out.append(f"{name} ({file})" if file else name)
    return out


def summarise(raw: Path, top: int = 20) -> dict:
    """Top frames by self and by total samples, from a py-spy raw file."""
    self_c: Counter[str] = Counter()
    total_c: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    samples = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        samples += n
        threads[stack.split(";", 1)[0]] += n
        frames = _frames(stack)
        if not frames:
            continue
        self_c[frames[-1]] += n
        for f in set(frames):
            total_c[f] += n
    share = lambda c: [(f, n, round(100 * n / samples, 1)) for f, n in c.most_common(top)]  # noqa: E731
    return {"samples": samples, "rate_hz": PYSPY_RATE_HZ, "threads": share(threads),
            "self": share(self_c), "total": share(total_c)}


def summary_lines(summary: dict, top: int = 20) -> list[str]:
    lines = [f"\n== gateway py-spy profile: {summary['samples']} busy samples at {summary['rate_hz']} Hz"
             " (idle stacks excluded)"]
    lines.append("  by thread: " + ", ".join(f"{t} {p}%" for t, _, p in summary["threads"][:6]))
    for key in ("self", "total"):
        lines.append(f"  top {top} frames by {key} samples:")
        lines += [f"    {p:5.1f}%  {f}" for f, _, p in summary[key][:top]]
    return lines
