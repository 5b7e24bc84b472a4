"""The batch store's tables (``proxy.batches.sql_store``): files, batches, and one row per batch line.

``fb_files`` keeps metadata and content; ``fb_batches`` one row per batch (``doc``: metadata, errors and times
as JSON); ``fb_batch_lines`` one row per input line: its request, its state (pending | claimed | done), who
holds it until when, how many times it was claimed and given back (``generation``: part of its request id), its
output line and what it cost (and would have cost at the standard price: the batch's savings). Created when the
store opens (its own database, like the stored responses'); a column added since is added to an older file then
(``added_columns``).
"""

from __future__ import annotations

import sqlalchemy as sa

META = sa.MetaData()
FILES = sa.Table(
    "fb_files", META,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("team", sa.String(200), nullable=False, index=True),
    sa.Column("key_id", sa.String(200), nullable=False),
    sa.Column("purpose", sa.String(32), nullable=False),
    sa.Column("filename", sa.String(512), nullable=False),
    sa.Column("bytes", sa.BigInteger, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("expires_at", sa.BigInteger),
    sa.Column("content", sa.LargeBinary, nullable=False),
)
BATCHES = sa.Table(
    "fb_batches", META,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("team", sa.String(200), nullable=False, index=True),
    sa.Column("key_id", sa.String(200), nullable=False),
    sa.Column("endpoint", sa.String(64), nullable=False),
    sa.Column("input_file_id", sa.String(64), nullable=False),
    sa.Column("completion_window", sa.String(16), nullable=False),
    sa.Column("status", sa.String(16), nullable=False, index=True),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("expires_at", sa.BigInteger, nullable=False),
    sa.Column("output_file_id", sa.String(64)),
    sa.Column("error_file_id", sa.String(64)),
    sa.Column("doc", sa.LargeBinary, nullable=False),  # {"metadata", "errors", "times"}
    sa.Column("releasing", sa.Boolean),  # ended with unrun lines' holds not yet released (``proxy.batches.reserve``)
)
LINES = sa.Table(
    "fb_batch_lines", META,
    sa.Column("batch_id", sa.String(64), primary_key=True),
    sa.Column("number", sa.Integer, primary_key=True),
    sa.Column("custom_id", sa.String(512), nullable=False),
    sa.Column("body", sa.LargeBinary, nullable=False),
    sa.Column("state", sa.String(8), nullable=False),  # pending | claimed | done
    sa.Column("runner", sa.String(128)),
    sa.Column("claimed_until", sa.BigInteger),
    sa.Column("not_before", sa.BigInteger, nullable=False, default=0),
    sa.Column("claims", sa.Integer, nullable=False, default=0),
    sa.Column("generation", sa.Integer, nullable=False, default=0),  # times given back: part of its request id
    sa.Column("ok", sa.Boolean),
    sa.Column("result", sa.LargeBinary),  # the output-file line (None: never ran, the window passed)
    sa.Column("request_id", sa.String(96)),
    sa.Column("cost_micro", sa.BigInteger),  # what the line's request cost, as its answer said (None: not said)
    sa.Column("list_micro", sa.BigInteger),  # ... and at the standard price (None: the same as cost_micro)
    sa.Column("held_micro", sa.BigInteger),  # its hold, taken when the batch was admitted (None: not held)
    sa.Index("fb_batch_lines_state", "state", "batch_id"),
)


def added_columns(engine: sa.Engine) -> None:
    """Columns added to the tables since a store could have been created: added to an older store as it opens."""
    for table, column, kind in (("fb_batch_lines", "list_micro", "BIGINT"), ("fb_batch_lines", "held_micro", "BIGINT"),
                                ("fb_batches", "releasing", "BOOLEAN")):
        if column in {c["name"] for c in sa.inspect(engine).get_columns(table)}:
            continue
        with engine.begin() as conn:
            try:
                conn.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
            except (sa.exc.OperationalError, sa.exc.ProgrammingError):  # another process added it meanwhile
                pass
