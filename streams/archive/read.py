"""Reading the archive: the live files of a date range, rows deduplicated by event id.

``archive_files`` is the one way to list the live files: the batch and hour
files under ``date=YYYY-MM-DD/hour=HH/`` and the daily files under
``date=YYYY-MM-DD/`` that the manifest vouches for (``streams.archive.vouch``:
listed live, with the listed SHA-256), so a file whose removal the manifest
records (compaction or retention, crashed before its delete), a file no entry
lists and a rewritten file are never read; ``archive_warnings`` names them. Readers refuse a file of a newer archive schema or one that is not
readable Parquet, naming it (``ArchiveError``); nothing is rewritten.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import date, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from streams.archive.manifest import Manifest
from streams.archive.schema import ARCHIVE_SCHEMA_VERSION, SCHEMA, schema_version_of
from streams.archive.vouch import vouched
from streams.archive.write import UNREADABLE_SCHEMA


def day_files(root: Path, day: date) -> list[Path]:
    """Every Parquet file of one event date on disk (batch and hour files by hour, then daily files), in name
    order."""
    folder = root / f"date={day:%Y-%m-%d}"
    if not folder.is_dir():
        return []
    return sorted(folder.glob("hour=*/*.parquet")) + sorted(folder.glob("day-*.parquet"))


def archive_files(root: str | Path, start: date, end: date) -> list[Path]:
    """The vouched-for Parquet files whose event date is in [start, end], by date, then name."""
    root = Path(root)
    good = set(vouched(root).files)
    files: list[Path] = []
    day = start
    while day <= end:
        files += [p for p in day_files(root, day) if p in good]
        day += timedelta(days=1)
    return files


def archive_warnings(root: str | Path) -> tuple[str, ...]:
    """The files every reader leaves out (or misses), one line each: see ``streams.archive.vouch``."""
    return vouched(root).warnings


def require_archive(root: str | Path) -> None:
    """Raise ``ArchiveError`` when ``root`` holds no archive at all (no manifest, no dated files), so a
    replay says so instead of reporting every live balance as a difference, or when its manifest does
    not chain (the archive cannot be trusted until ``farebox archive verify`` is clean)."""
    root = Path(root)
    manifest = Manifest(root)
    if not manifest.exists() and not any(root.glob("date=*/**/*.parquet")):
        raise ArchiveError(f"the archive at {root} is empty: nothing has been archived yet (embedded: "
                           f"`farebox serve` archives as it runs, `farebox archive flush` now; distributed: "
                           f"run `farebox archiver`)")
    problems = manifest.read().chain_problems
    if problems:
        raise ArchiveError(f"{manifest.path}: the manifest does not chain ({problems[0]}); the archive cannot "
                           f"be trusted — run `farebox archive verify`")


def archive_days(root: str | Path) -> list[date]:
    """Every event date with a folder in the archive, in order."""
    days = []
    for folder in Path(root).glob("date=*"):
        try:
            days.append(date.fromisoformat(folder.name.removeprefix("date=")))
        except ValueError:
            continue
    return sorted(days)


class ArchiveError(Exception):
    """An archive file this build cannot read: corrupt, truncated, or of a newer schema. Names the file."""


def read_file(path: Path, schema: pa.Schema) -> pa.Table:
    try:
        if schema is SCHEMA:
            version = schema_version_of(pq.read_schema(path).metadata)
            if version > ARCHIVE_SCHEMA_VERSION:
                raise ArchiveError(f"{path}: archive schema {version} is newer than this build reads "
                                   f"({ARCHIVE_SCHEMA_VERSION}); upgrade farebox to read it")
        return pq.read_table(path, schema=schema)
    except FileNotFoundError:
        raise  # replaced by a compaction since it was listed: the caller lists again
    except (pa.ArrowException, OSError) as exc:
        raise ArchiveError(f"{path}: not a readable archive file ({exc})") from None


def first_of_each(files: list[Path], schema: pa.Schema, key: Callable[[pa.Table], Iterable]) -> pa.Table:
    """The rows of ``files`` by partition and offset, keeping the first row of each ``key``."""
    if not files:
        return schema.empty_table()
    table = pa.concat_tables(read_file(f, schema) for f in files)
    table = table.sort_by([("log_partition", "ascending"), ("log_offset", "ascending")])
    seen: set = set()
    keep = []
    for value in key(table):
        keep.append(value not in seen)
        seen.add(value)
    return table.filter(pa.array(keep, type=pa.bool_()))


def read_unreadable(root: str | Path) -> pa.Table:
    """Every unreadable record archived (``_unreadable/``), by partition and offset, each once."""
    files = sorted((Path(root) / "_unreadable").glob("part-*.parquet"))
    return first_of_each(files, UNREADABLE_SCHEMA, lambda t: zip(t.column("log_partition").to_pylist(),
                                                                  t.column("log_offset").to_pylist()))


def read_archive(root: str | Path, start: date, end: date, *, columns: list[str] | None = None) -> pa.Table:
    """Rows with event date in [start, end], each event id once (the first by partition and offset).

    A file compacted away between listing and reading is not an error: the files are listed again."""
    missing = None
    for _ in range(5):
        try:
            table = first_of_each(archive_files(root, start, end), SCHEMA, lambda t: t.column("id").to_pylist())
        except FileNotFoundError as exc:
            missing = exc.filename
            continue
        return table if columns is None else table.select(columns)
    raise ArchiveError(f"{missing}: archive files kept disappearing while being read")
