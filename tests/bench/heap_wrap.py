"""Trace what a running process keeps between two moments: what a soak uses to find what grows.

``python -m tests.bench.heap_wrap DIR farebox serve --config PATH`` runs ``farebox serve --config PATH`` as
``python -m farebox`` would. The first SIGUSR2 starts ``tracemalloc`` (``FRAMES`` frames of traceback; started
late, so the process starts and warms up at full speed), the second writes ``DIR/kept.snap``: every block
allocated since the first and still alive (``tracemalloc.Snapshot.dump``). ``growth`` prints it by allocating
traceback. Tracing slows the process (about 2x): use it to find a leak, never for the soak's figures.
"""

from __future__ import annotations

import runpy
import signal
import sys
import tracemalloc
from pathlib import Path

FRAMES = 6


def _on_signal(folder: Path):
    def toggle(signum: int, frame: object) -> None:
        if not tracemalloc.is_tracing():
            tracemalloc.start(FRAMES)
        else:
            tracemalloc.take_snapshot().dump(str(folder / "kept.snap"))
            tracemalloc.stop()

    return toggle


def growth(snapshot: Path, top: int = 15, out=print) -> list[tuple[str, int, int]]:
    """The ``top`` allocating tracebacks by bytes still alive in ``snapshot``: (where, bytes, blocks), each
    printed innermost frame first."""
    skip = (tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen importlib._bootstrap>"))
    stats = tracemalloc.Snapshot.load(str(snapshot)).filter_traces(skip).statistics("traceback")
    rows = []
    for stat in stats[:top]:
        frames = [f"{f.filename.rsplit('/site-packages/', 1)[-1]}:{f.lineno}" for f in reversed(stat.traceback)]
        where = " <- ".join(frames[:6])
        rows.append((where, stat.size, stat.count))
        out(f"  {stat.size / 1024:10.0f} KiB {stat.count:8d} blocks  {where}")
    return rows


def main() -> None:
    folder = Path(sys.argv[1])
    folder.mkdir(parents=True, exist_ok=True)
    module, sys.argv = sys.argv[2], sys.argv[2:]
    signal.signal(signal.SIGUSR2, _on_signal(folder))
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
