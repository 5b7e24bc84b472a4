"""Where a worker's time goes: a summary of ``py-spy record --format raw`` samples.

Raw (collapsed) lines are ``thread (tid);frame;frame;... count`` with frames
``function (path:line)``, outermost first; only busy samples are recorded
(py-spy skips idle threads unless told otherwise). The summary gives the
share of samples per thread, per package of the innermost frame ("self"
time: faust, mode, aiokafka, orjson, asyncio, farebox's own ``ledger`` /
``streams``...), the top functions by self time, and the top frames of
farebox's own code by inclusive time (what the agents spend, callees
included), and the same over all code below the event loop's plumbing.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.*) \((?P<path>[^()]*?)(?::(?P<line>\d+))?\)$")
OWN = ("ledger", "streams", "farebox", "pricing", "proxy")


def _short(path: str) -> str:
    """py-spy names a file relative to its sys.path entry ("faust/topics.py", "ledger/codec.py")."""
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1]
    parts = Path(path).parts
    for i, part in enumerate(parts):
        if part in OWN and i + 1 < len(parts):
            return "/".join(parts[i:])
    if "/lib/python3" in path:
        return path.split("/lib/python3", 1)[1].split("/", 1)[-1]
    return path


def _package(path: str) -> str:
    """The top-level package (or stdlib module) a file belongs to: faust, aiokafka, asyncio, ledger, ..."""
    short = _short(path)
    if short.startswith("<frozen"):
        return "stdlib (frozen)"
    head, sep, _ = short.partition("/")
    return head if sep else Path(short).stem


def _frame(text: str) -> tuple[str, str, str]:
    m = _FRAME.match(text)
    if not m:
        return text, "", ""
    return m["func"], m["path"], m["line"] or ""


def summary(raw: Path, top: int = 12) -> dict:
    threads: Counter = Counter()
    packages: Counter = Counter()
    selfs: Counter = Counter()
    inclusive: Counter = Counter()
    everything: Counter = Counter()  # inclusive, any code
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_s = line.rpartition(" ")
        if not stack or not count_s.isdigit():
            continue
        count = int(count_s)
        frames = stack.split(";")
        thread, frames = (frames[0], frames[1:]) if frames[0].startswith("thread ") else ("", frames)
        if not frames:
            continue
        total += count
        threads[thread] += count
        func, path, _ = _frame(frames[-1])
        packages[_package(path)] += count
        selfs[f"{func} ({_short(path)})"] += count
        seen = set()
        for f in frames:
            func, path, _ = _frame(f)
            name = f"{func} ({_short(path)})"
            if name in seen:
                continue
            seen.add(name)
            everything[name] += count
            if _package(path) in OWN:
                inclusive[name] += count

    def share(counter: Counter, n: int) -> list[tuple[str, float]]:
        return [(k, round(100 * v / total, 1)) for k, v in counter.most_common(n)] if total else []

    # the plumbing every sample passes through (event loop, the CLI) says nothing: keep what is below half
    work = Counter({k: v for k, v in everything.items() if v * 2 < total})
    return {"samples": total, "inclusive_top": share(work, top + 4), "threads": share(threads, 6),
            "self_by_package": share(packages, top),
            "self_top": share(selfs, top), "own_inclusive_top": share(inclusive, top), "raw": str(raw)}


def lines(prof: dict) -> list[str]:
    if "error" in prof:
        return [f"  profile: py-spy failed: {prof['error']}"]
    out = [f"  profile (py-spy, {prof['samples']:,} busy samples at 200 Hz; raw stacks in {prof['raw']}):"]
    for title, key in (("busy samples by thread", "threads"), ("self time by package", "self_by_package"),
                       ("top functions by self time", "self_top"),
                       ("farebox code, inclusive (callees counted)", "own_inclusive_top"),
                       ("any code, inclusive, below the event loop", "inclusive_top")):
        out.append(f"    {title}:")
        out += [f"      {pct:5.1f}%  {name}" for name, pct in prof[key]]
    return out
