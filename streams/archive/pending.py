"""What the archive does not hold yet: the corrections in the embedded SQLite log after the archiver's offset.

Re-rating must not correct a request twice; what it has already corrected is in the archive, plus (embedded
mode) the ``rating.corrected`` events appended to the log since the archiver's last pass. In distributed mode
the archiver consumes Kafka on its own, so nothing is read here (``log_path`` None).
"""

from __future__ import annotations

import json
from pathlib import Path

from ledger.events import RatingCorrected
from streams.sqlite_log import SqliteEventLog


async def unarchived_corrections(log_path: Path | None, archive: Path) -> list[RatingCorrected]:
    """The corrections in the SQLite log at ``log_path`` after the archive's offset (none if no log yet)."""
    if log_path is None or not Path(log_path).exists():
        return []
    try:
        after = int(json.loads((archive / "_state" / "log.json").read_text())["last_offset"])
    except (OSError, ValueError, KeyError):
        after = 0
    log = SqliteEventLog.open(log_path, readonly=True)
    found: list[RatingCorrected] = []
    try:
        while batch := await log.read(after=after, limit=10_000):
            found += [e for _, e in batch if isinstance(e, RatingCorrected)]
            after = batch[-1][0]
    finally:
        await log.close()
    return found
