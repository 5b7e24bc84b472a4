"""Compaction and retention: new files and manifest entries, never an edit in place.

**Compaction** merges the live files of each closed event date (batch files,
hour files, an earlier daily file, late arrivals) into one daily file
``date=D/day-<sha256 prefix>.parquet``, and, while a day is open, the files of
each closed hour into ``date=D/hour=H/hour-<sha256 prefix>.parquet``; each
event id once (the first by partition and offset, as readers keep it). Order,
under the manifest lock:

1. check every file to be merged against its listed SHA-256 (a changed file
   is never laundered into a new one: the day is refused, naming the file);
2. journal the plan (``_journal/compact.json``: output and replaced files);
3. write the daily file (temp, fsync, rename);
4. append a ``compact`` manifest entry listing it and the files it replaces;
5. delete the replaced files; remove the journal.

Killed before 4, the journal names an output the manifest does not list: the
next run deletes it (the replaced files are untouched and still live).
Killed after 4, the replaced files are recorded as removed but still on disk:
readers skip them (``archive_files``) and the next run deletes them.

**Retention** drops the live files of dates before a cut-off: the journal,
one ``expire`` entry naming them, the deletes, the journal removed (a crash
between is finished by the next run, as above). ``_unreadable/`` files are
kept. While the journal exists readers consult the manifest for removed
files (``archive_files``); otherwise every removed file is already gone.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

from streams.archive.manifest import HOUSEKEEPING_JOURNAL, Manifest, Replayed, file_entry, sha256_file
from streams.archive.read import ArchiveError, archive_days, day_files, first_of_each
from streams.archive.schema import SCHEMA
from streams.archive.write import fsync_path, parquet_bytes, write_atomic

log = logging.getLogger("farebox.archive")

JOURNAL = Path(HOUSEKEEPING_JOURNAL)


@dataclass
class Housekeeping:
    """What one compaction or retention run did."""

    compacted_days: list[date] = field(default_factory=list)
    compacted_hours: int = 0
    written: list[Path] = field(default_factory=list)
    replaced: int = 0
    expired: int = 0
    leftovers_deleted: int = 0


def _checked(manifest: Manifest, state: Replayed, files: list[Path]) -> None:
    if state.chain_problems:
        raise ArchiveError(f"{manifest.path}: the manifest does not chain ({state.chain_problems[0]}); "
                           f"nothing was rewritten — run `farebox archive verify`")
    for path in files:
        sha, seq = state.live[manifest.relative(path)]
        if sha256_file(path) != sha:
            raise ArchiveError(f"{path}: changed since manifest entry {seq} listed it; nothing was rewritten — "
                               f"run `farebox archive verify`")


def _delete(paths: list[Path]) -> None:
    folders = set()
    for path in paths:
        path.unlink(missing_ok=True)
        folders.add(path.parent)
    for folder in sorted(folders, key=lambda f: len(f.parts), reverse=True):
        if not folder.is_dir():  # removed with an emptied child folder
            continue
        fsync_path(folder)
        for empty in (folder, folder.parent):  # an emptied hour=, then date= folder
            if empty.name.startswith(("hour=", "date=")) and empty.is_dir() and not any(empty.iterdir()):
                try:
                    empty.rmdir()
                except OSError:  # a writer just put a file there (or made the folder again): keep it
                    pass


def finish(root: Path, manifest: Manifest) -> tuple[int, Replayed]:
    """Complete what a crash interrupted: drop an unlisted compaction output, delete files whose removal
    is recorded (only while they are the very file removed). Caller holds the lock; the number of files
    deleted, and the manifest as read."""
    journal = root / JOURNAL
    manifest.repair()
    state = manifest.read()
    deleted = 0
    if journal.exists():
        plan = json.loads(journal.read_text())
        if plan["output"] is not None and plan["output"] not in state.live:
            (root / plan["output"]).unlink(missing_ok=True)
            deleted += 1
        journal.unlink()
    leftovers = [root / p for p, (_, sha) in state.removed.items()
                 if sha is not None and (root / p).exists() and sha256_file(root / p) == sha]
    _delete(leftovers)
    return deleted + len(leftovers), state


def _merge(root: Path, manifest: Manifest, state: Replayed, files: list[Path], output_dir: Path, prefix: str,
           now: datetime | None) -> tuple[Path, int]:
    """Steps 1-5 above for one group of live files: the merged file written and listed, the rest deleted."""
    _checked(manifest, state, files)
    table = first_of_each(files, SCHEMA, lambda t: t.column("id").to_pylist())
    data = parquet_bytes(table)
    output = output_dir / f"{prefix}-{hashlib.sha256(data).hexdigest()[:16]}.parquet"
    replaced = [manifest.relative(p) for p in files if p != output]
    write_atomic(root / JOURNAL, json.dumps({"output": manifest.relative(output), "replaces": replaced}).encode())
    write_atomic(output, data)
    entry = manifest.append_locked("compact", files=[file_entry(manifest.relative(output), data, table.num_rows)],
                                   removes=replaced, now=now)
    _delete([root / p for p in replaced])
    (root / JOURNAL).unlink()
    for path in replaced:  # keep ``state`` what a re-read would give, without re-reading the manifest
        state.removed[path] = (entry["seq"], state.live.pop(path)[0])
    state.live[manifest.relative(output)] = (entry["files"][0]["sha256"], entry["seq"])
    return output, len(replaced)


def compact(root: str | Path, *, before: date, now: datetime | None = None) -> Housekeeping:
    """Merge the live files of each event date before ``before`` that has more than one into one daily file
    ``date=D/day-….parquet``. Raises ``ArchiveError`` naming a changed or unreadable file; nothing is
    rewritten."""
    root = Path(root)
    manifest = Manifest(root)
    done = Housekeeping()
    with manifest.locked():
        done.leftovers_deleted, state = finish(root, manifest)
        for day in archive_days(root):
            if day >= before:
                break
            files = [p for p in day_files(root, day) if manifest.relative(p) in state.live]
            if len(files) < 2:
                continue
            output, replaced = _merge(root, manifest, state, files, root / f"date={day:%Y-%m-%d}", "day", now)
            done.compacted_days.append(day)
            done.written.append(output)
            done.replaced += replaced
    return done


def compact_hours(root: str | Path, *, before: datetime, now: datetime | None = None) -> Housekeeping:
    """Merge the live files of each hour that ended by ``before`` and has more than one into one file
    ``date=D/hour=H/hour-….parquet``: a day's many small batch files become at most 24 while it is open."""
    root = Path(root)
    manifest = Manifest(root)
    done = Housekeeping()
    with manifest.locked():
        done.leftovers_deleted, state = finish(root, manifest)
        for day in archive_days(root):
            for folder in sorted((root / f"date={day:%Y-%m-%d}").glob("hour=*")):
                hour = folder.name.removeprefix("hour=")
                if not hour.isdigit():
                    continue
                if datetime(day.year, day.month, day.day, tzinfo=timezone.utc) + timedelta(hours=int(hour) + 1) > before:
                    continue
                files = [p for p in sorted(folder.glob("*.parquet")) if manifest.relative(p) in state.live]
                if len(files) < 2:
                    continue
                output, replaced = _merge(root, manifest, state, files, folder, "hour", now)
                done.compacted_hours += 1
                done.written.append(output)
                done.replaced += replaced
    return done


def expire(root: str | Path, *, before: date, now: datetime | None = None) -> Housekeeping:
    """Drop the live files of event dates before ``before`` (retention), recorded in one manifest entry."""
    root = Path(root)
    manifest = Manifest(root)
    done = Housekeeping()
    with manifest.locked():
        done.leftovers_deleted, state = finish(root, manifest)
        files = [p for day in archive_days(root) if day < before
                 for p in day_files(root, day) if manifest.relative(p) in state.live]
        if files:
            removes = [manifest.relative(p) for p in files]
            write_atomic(root / JOURNAL, json.dumps({"output": None, "replaces": removes}).encode())
            manifest.append_locked("expire", removes=removes, now=now, before=before.isoformat())
            _delete(files)
            (root / JOURNAL).unlink()
            done.expired = len(files)
    return done
