"""Parsing ``archive:`` in farebox.yaml into ``streams.archive.config.ArchiveSettings``."""

from __future__ import annotations

from pathlib import Path

from proxy.control.problems import Reader
from streams.archive.config import ArchiveSettings


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
