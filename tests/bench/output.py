"""The end every benchmark script shares: print its problems (or the all-clear), save the JSON report."""

from __future__ import annotations

import json
from pathlib import Path


def finish(rep: dict, problems: list[str], path: Path, all_clear: str, indent: str = "") -> int:
    """Print ``problems`` (or ``all_clear``), write ``rep`` to ``path``; the exit code: 1 if any problem."""
    rep["problems"] = problems
    for p in problems:
        print(f"{indent}PROBLEM: {p}")
    if not problems:
        print(f"{indent}{all_clear}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rep, indent=2, default=str))
    print(f"figures written to {path} (elapsed {rep['elapsed_s']} s)")
    return 1 if problems else 0
