"""The Parquet archive of the request events: its layout, and the names the rest of farebox uses.

Layout under the archive root (default ``<state_dir>/archive``)::

    date=2026-10-03/hour=10/part-<partition>-<first offset>-<last offset>.parquet   # one batch, one hour
    date=2026-10-03/hour=10/hour-<sha256 prefix>.parquet   # a closed hour's batch files merged
    date=2026-10-03/day-<sha256 prefix>.parquet     # a closed day's files merged (streams.archive.compact)
    _unreadable/part-<partition>-<first>-<last>.parquet   # records that are not events
    _manifest.jsonl                 # every file and its SHA-256, hash-chained (streams.archive.manifest)
    _manifest.lock                  # flock held while appending to the manifest or compacting
    _journal/<source>.json          # the batch being written (gone once committed)
    _journal/compact.json           # the compaction being written (gone once done)
    _state/log.json                 # embedded mode: the last archived log offset

One row per event (``streams.archive.schema``): the envelope, ``stored_at``
(when the archiver wrote the row), ``log_partition``/``log_offset`` (where it
came from: a Kafka partition and offset, or partition 0 and the SQLite log
offset), typed columns for everything finance groups or sums by, and
``event`` (the full event JSON, as ``ledger.codec`` wrote it). Offsets are
zero-padded so names sort. Files are written once and never changed; a
compaction or retention run writes new files and records in the manifest
which files it replaces or drops, then deletes them.

Reading: ``archive_files``/``read_archive`` list and read the live files and
keep each event id once. SQL over the files (DuckDB) reads the same set with

    read_parquet('<root>/date=*/**/*.parquet', hive_partitioning = false)

deduplicated by ``id``: ``hive_partitioning = false`` because hour and day
files sit at different depths (the typed ``event_time`` column replaces the
path's date and hour). A replaced file can outlive its manifest entry only
when a crash came between the entry and the delete (the next compaction
deletes it); its rows are the same events, so the dedupe by ``id`` keeps sums
exact. Exactly once per event id: the flush order in ``streams.archive.write``.

A record that ``ledger.codec`` cannot read (the worker sends it to the
dead-letter topic: ``streams.dead_letters``) is archived too, as it came, in
``_unreadable/`` (``UNREADABLE_SCHEMA``: where it came from, why, the bytes),
so the archive holds every record of the topic and the archiver never stops
on one. ``read_unreadable`` lists them; ``read_archive`` does not read them.
"""
