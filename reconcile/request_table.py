"""The per-request table: the warehouse's ``request_base`` and ``corrections`` views, materialized beside the archive.

Finance's reports group requests, and computing one row per request from the
raw events (first admission, attempts, first close after it) reads every
column of every event. Compaction therefore writes the result once
(``reconcile.request_table_write``), as two Parquet files outside the
``date=`` folders, so the archive glob ``date=*/**/*.parquet`` never sees them::

    summary/requests-<sha256 prefix>.parquet      # one row per admitted request: the request_base view
    summary/corrections-<sha256 prefix>.parquet   # one row per rating.corrected event id: the corrections view
    summary/entries-<sha256 prefix>.parquet       # the requests' hold and close ledger entries: request_entries

All three are listed in the manifest (a ``summary`` entry that also removes the
previous ones), so ``farebox archive verify`` checks them like every file.

Invariant: the warehouse answers exactly what the raw views would. The requests
file's Parquet metadata records the budget zone it was computed in and the
archive files it was computed from (path and size; archive files are immutable
and compacted outputs are named by content). ``usable_table`` accepts it only in
the warehouse's zone and while every one of those files is still present; the
files that arrived since are ``fresh``. A request row depends only on that
request's own events, so the warehouse (``Warehouse._read_table``) takes the
table's row of every request with no event in a fresh file, and recomputes from
all the raw events the requests that have one (and their ledger entries);
corrections are the table's plus
the fresh files', each id once (first in log order). A compaction or retention
since (a source gone), another zone, or no table, and the warehouse reads the raw
events, as the plain ``duckdb`` CLI over ``views.sql`` always does. So every
total is the same to the micro-unit whichever path answers.

Compaction builds the table over the closed days only (dates before its
cut-off), so the hourly merging of today's files does not retire it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from streams.archive.vouch import vouched

SUMMARY_DIR = "summary"
TABLE_FORMAT = 4
"""Bump when the columns of ``request_base`` or ``corrections`` change: a table of another format is not used."""
META_FORMAT = b"farebox.request_table"
META_TZ = b"farebox.budget_tz"
META_SOURCES = b"farebox.sources"
META_CORRECTIONS = b"farebox.corrections_file"
META_ENTRIES = b"farebox.entries_file"

Sources = list[tuple[str, int]]


@dataclass(frozen=True, slots=True)
class RequestTable:
    """A usable pair of table files."""

    requests: Path
    corrections: Path
    entries: Path
    fresh: tuple[Path, ...] = ()  # archive files present now that the table was not computed from


def archive_sources(root: Path) -> Sources:
    """Every archive file the views read (``date=*/**/*.parquet`` the manifest vouches for) as (path under root,
    size), in name order. A file removed while listing (compaction, retention) is left out: the list then
    matches no table."""
    out: Sources = []
    for path in sorted(vouched(root).files):
        try:
            out.append((path.relative_to(root).as_posix(), path.stat().st_size))
        except FileNotFoundError:
            continue
    return out


def sources_digest(sources: Sources) -> str:
    """SHA-256 of the source list (what the manifest entry records as ``covers``)."""
    return hashlib.sha256(orjson.dumps(sources)).hexdigest()


def table_metadata(tz: str, sources: Sources, corrections_name: str, entries_name: str) -> dict[bytes, bytes]:
    return {META_FORMAT: str(TABLE_FORMAT).encode(), META_TZ: tz.encode(), META_SOURCES: orjson.dumps(sources),
            META_CORRECTIONS: corrections_name.encode(), META_ENTRIES: entries_name.encode()}


def _read_meta(path: Path) -> dict[bytes, bytes] | None:
    try:
        return pq.read_schema(path).metadata or {}
    except (pa.ArrowException, OSError):
        return None  # unreadable: not used (``farebox archive verify`` names it)


def usable_table(root: str | Path, tz: str, sources: Sources | None = None, *,
                 vouched: frozenset[str] | None = None) -> RequestTable | None:
    """The table computed in ``tz`` from archive files that are all still present (``sources``: the files
    present now, listed if not given), with the files it does not cover; None: read the raw events. With
    ``vouched`` (summary paths under the root the manifest vouches for), only a table whose three files are
    among them."""
    root = Path(root)
    candidates = sorted((root / SUMMARY_DIR).glob("requests-*.parquet"))
    if vouched is not None:
        candidates = [p for p in candidates if p.relative_to(root).as_posix() in vouched]
    if not candidates:
        return None
    current = archive_sources(root) if sources is None else sources
    if not current:
        return None
    present = set(current)
    for path in candidates:
        meta = _read_meta(path)
        if meta is None or meta.get(META_FORMAT) != str(TABLE_FORMAT).encode() or meta.get(META_TZ) != tz.encode():
            continue
        try:
            covered = {(p, size) for p, size in orjson.loads(meta.get(META_SOURCES, b"null"))}
        except (ValueError, TypeError):
            continue
        if not covered or not covered <= present:
            continue  # a file it was computed from is gone (compacted, expired): it describes other files
        corrections = root / SUMMARY_DIR / meta.get(META_CORRECTIONS, b"").decode()
        entries = root / SUMMARY_DIR / meta.get(META_ENTRIES, b"").decode()
        if vouched is not None and not all(f.relative_to(root).as_posix() in vouched for f in (corrections, entries)):
            continue
        if all(f.is_file() and _read_meta(f) is not None for f in (corrections, entries)):
            fresh = tuple(root / p for p, size in current if (p, size) not in covered)
            return RequestTable(path, corrections, entries, fresh)
    return None
