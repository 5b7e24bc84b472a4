"""The Parquet archive's settings as values: where, how often, how long, when to compact.

Parsed from ``archive:`` in farebox.yaml by ``farebox.archive_settings``; apart from it so the archiver's
child process, which receives them with every pass, loads neither YAML nor SQLAlchemy to read them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


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
