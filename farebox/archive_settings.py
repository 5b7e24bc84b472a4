"""The Parquet archive's settings (``archive:`` in farebox.yaml): where, how often, how long, when to compact.

Apart from ``farebox.settings`` so the archiver's child process, which receives them with every pass, loads
neither YAML nor SQLAlchemy to read them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from proxy.control.problems import Reader


@dataclass(frozen=True)
class ArchiveSettings:
    """The Parquet archive (``streams/archive/__init__.py``): where, how often, how long, when to compact."""

    path: Path | None = None  # None: <state_dir>/archive
    flush_interval_s: float = 5.0  # archive pending events at least this often
    flush_events: int = 5000  # ... or as soon as this many are pending
    retention_days: int | None = None  # drop files of event dates older than this (None: keep forever)
    compact: bool = True  # merge each closed hour's batch files into one, and each closed day's into one
    compact_hour_utc: int = 1  # from this UTC hour on, once a day, compact the days before today
    group_id: str = "farebox-archiver"  # distributed: the archiver's consumer group
    # processes that decode batches beside the archiver (``streams.archive.pool``): always in ``farebox archiver``;
    # in ``farebox serve``'s archiver child (niced) only for a backlog (more than ``flush_events`` pending).
    # None: one per core, when there are two or more; 0: none.
    decode_processes: int | None = None

    def decoders(self) -> int:
        """How many decode processes an archiver runs (``decode_processes``, or its default)."""
        if self.decode_processes is not None:
            return self.decode_processes
        cores = os.cpu_count() or 1
        return cores if cores > 1 else 0


def archive_settings(a: Reader, base: Path) -> ArchiveSettings:
    """The ``archive:`` section read by ``a``; a relative ``path`` is taken from ``base``."""
    dflt = ArchiveSettings()
    path = a.str("path", None)
    hour = a.int("compact_hour_utc", dflt.compact_hour_utc, 0)
    if hour is not None and hour > 23:
        a.problems.add(a.at("compact_hour_utc"), f"must be an hour of the day, 0-23, got {hour}")
    out = ArchiveSettings(
        path=base / path if path else None,
        flush_interval_s=a.number("flush_interval_s", dflt.flush_interval_s, 0.05),
        flush_events=a.int("flush_events", dflt.flush_events, 1),
        retention_days=a.int("retention_days", None, 1),
        compact=a.bool("compact", dflt.compact),
        compact_hour_utc=hour,
        group_id=a.str("group_id", dflt.group_id),
        decode_processes=a.int("decode_processes", None, 0),
    )
    a.reject_unknown()
    return out
