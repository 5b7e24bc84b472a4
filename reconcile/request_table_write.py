"""Writing the per-request table (``reconcile.request_table``) after compaction or retention.

``write_request_table(root, tz, before=...)`` computes ``request_base`` and
``corrections`` over the raw events of the files of event dates before
``before`` (the views of ``sql/views.sql`` over just those files, never the
table itself), then, under the manifest lock:

1. checks the archive files are still the ones it read (else it writes nothing:
   a table of a file set that no longer exists would never be used);
2. writes the three files (temp, fsync, rename) under ``summary/``, named by content;
3. appends one ``summary`` manifest entry listing them, removing the previous
   table's files, and recording ``covers`` (the digest of the source list);
4. deletes the previous files.

Killed before 3, the new files are unlisted (``farebox archive verify`` names
them) and unused unless they match; the next run lists a fresh pair. Killed
after 3, the old files are recorded as removed and the next compaction deletes
them (``streams.archive.compact.finish``). Readers never depend on the order:
they use a table only when its recorded sources equal the files present.
"""

from __future__ import annotations

import hashlib
from datetime import date, datetime
from pathlib import Path

import pyarrow as pa

from reconcile.request_table import SUMMARY_DIR, Sources, archive_sources, sources_digest, table_metadata
from reconcile.warehouse import Warehouse
from streams.archive.manifest import Manifest, file_entry
from streams.archive.write import parquet_bytes, write_atomic


def _dated_before(sources: Sources, before: date | None) -> Sources:
    if before is None:
        return sources
    cut = f"date={before:%Y-%m-%d}"
    return [(p, size) for p, size in sources if p.split("/", 1)[0] < cut]


def _named(table: pa.Table, prefix: str) -> tuple[str, bytes]:
    data = parquet_bytes(table, dictionary=True)  # the table showback groups: its dictionaries kept
    return f"{SUMMARY_DIR}/{prefix}-{hashlib.sha256(data).hexdigest()[:16]}.parquet", data


def write_request_table(root: str | Path, tz: str, *, before: date | None = None,
                        now: datetime | None = None) -> Path | None:
    """Write the table of the archive files at ``root`` (those of event dates before ``before``, if given) in
    budget zone ``tz``; the requests file, or None when there are none or they changed while it was computed."""
    root = Path(root)
    sources = _dated_before(archive_sources(root), before)
    if not sources:
        return None
    with Warehouse(root, tz=tz, files=[root / p for p, _ in sources]) as warehouse:
        requests = warehouse.arrow("SELECT * FROM request_base ORDER BY request_id")
        corrections = warehouse.arrow("SELECT * FROM corrections ORDER BY id")
        entries = warehouse.arrow("SELECT * FROM request_entries ORDER BY request_id, entry, scope")
    corrections_path, corrections_data = _named(corrections, "corrections")
    entries_path, entries_data = _named(entries, "entries")
    requests = requests.replace_schema_metadata(table_metadata(tz, sources, Path(corrections_path).name,
                                                               Path(entries_path).name))
    requests_path, requests_data = _named(requests, "requests")
    manifest = Manifest(root)
    with manifest.locked():
        if _dated_before(archive_sources(root), before) != sources:
            return None
        state = manifest.read()
        new = ((corrections_path, corrections_data, corrections), (entries_path, entries_data, entries),
               (requests_path, requests_data, requests))  # the requests file last: it names the others
        old = sorted(p for p in state.live if p.startswith(f"{SUMMARY_DIR}/") and p not in {n[0] for n in new})
        for path, data, _ in new:
            write_atomic(root / path, data)
        manifest.append_locked("summary", now=now, covers=sources_digest(sources), budget_tz=tz,
                               files=[file_entry(path, data, table.num_rows) for path, data, table in new],
                               removes=old)
        for path in old:
            (root / path).unlink(missing_ok=True)
    return root / requests_path
