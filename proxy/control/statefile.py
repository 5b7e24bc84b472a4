"""Embedded control-plane state: append-only JSON Lines files in ``state_dir``.

``keys.jsonl`` (key hashes), ``budgets.jsonl`` (budget limits set through the
admin API; the latest line per scope wins) and ``admin-tokens.jsonl``. Each
record is one fsynced write of one line, so a crash leaves every file whole.
The config database (SQLite / PostgreSQL via SQLAlchemy) is now the control
plane's store: these files are imported into it at first start and, as an
inbox, whenever lines are appended (``proxy/control/legacy.py``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

KEYS = "keys.jsonl"
BUDGETS = "budgets.jsonl"
ADMIN_TOKENS = "admin-tokens.jsonl"


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Records from a JSON Lines file; a missing file is an empty list."""
    if not path.exists():
        return []
    out = []
    for n, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"{path}:{n}: not valid JSON ({exc})") from None
        out.append(rec)
    return out


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """One write of one line, fsynced: a crash leaves the file whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = orjson.dumps(record) + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
