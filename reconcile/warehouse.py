"""The finance warehouse: an in-memory DuckDB over the Parquet archive, with the views of ``sql/views.sql``.

The views are the finance interface: reports and the admin usage API run SQL
over them and never re-implement a sum in Python. This module only opens
them and turns every way the archive can be unreadable into one
``WarehouseError`` that names the file:

* an empty archive (no ``date=*/**/*.parquet`` files under the root);
* a file of another archive schema than the views read (``archive_guard``
  checks the ``farebox.archive_schema`` Parquet metadata of every file, once
  when the warehouse opens; the plain duckdb CLI checks it at every query);
* a corrupt or truncated file (DuckDB names it; when it does not, every file
  is read with pyarrow to find the first that fails).

The views read only the files the manifest vouches for (``streams.archive.vouch``:
listed live, with the listed SHA-256), as an explicit list (``archive_paths``);
a file dropped in, rewritten, or listed after a break in the chain is left out
of every view and named in ``Warehouse.warnings``. The per-request table is used
only when its files are vouched for too.

``locked=True`` is the finance shell's warehouse (``farebox finance sql|shell``):
once the views are loaded, DuckDB's file access is turned off except for the
files the views read (``allowed_paths``, ``enable_external_access = false``,
``lock_configuration``), and ``query`` runs only statements that cannot write
(``READ_ONLY_STATEMENTS``): so user SQL reads the ledger and nothing else, never
``/etc``, never a ``COPY`` over an archive file. Results leave through the CLI
(``--out``).

When the per-request table (``reconcile.request_table``) was built from exactly
the archive files present and in the same budget zone, ``request_base`` and
``corrections`` read it instead of the raw events (same rows, much faster);
otherwise the views compute them from the events.

Nothing here writes to the archive. The archive is read through the layout
``streams.archive`` writes (hourly files under ``date=YYYY-MM-DD/hour=HH/``,
compacted daily files under ``date=YYYY-MM-DD/``); rows are deduplicated by
event id in the views.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from reconcile.errors import ReconcileError
from reconcile.request_table import RequestTable, usable_table
from streams.archive.vouch import Vouched, vouched

VIEWS_SQL = Path(__file__).with_name("sql") / "views.sql"
ARCHIVE_GLOB = "date=*/**/*.parquet"
VIEWS_ARCHIVE_SCHEMA = 2
"""The archive schema ``views.sql`` is written against (its ``archive_guard``); a test keeps it equal to
``streams.archive.schema.ARCHIVE_SCHEMA_VERSION``, so a schema bump makes someone read the views again."""

VIEWS = ("archive_files", "archive_scan", "archive_rows", "events", "request_base", "corrections", "requests", "attempts",
         "ledger_entries", "scope_balances", "minute_rollups", "daily_cost")

PINNED = ("requests", "scope_balances")
"""The views ``Warehouse.pin_requests`` snapshots, in the order they are computed."""


class WarehouseError(ReconcileError):
    """The warehouse cannot answer: empty or unreadable archive, bad query, nothing for the period asked."""


@dataclass(frozen=True, slots=True)
class Result:
    """A query's answer: column names and rows, in order."""

    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]

    def dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row)) for row in self.rows]


READ_ONLY_STATEMENTS = frozenset({duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN,
                                  duckdb.StatementType.CREATE, duckdb.StatementType.DROP})
"""What a locked warehouse runs: queries, and views or tables of this in-memory session (never COPY, EXPORT,
ATTACH, LOAD, PRAGMA, CALL or SET)."""


def archive_files(root: str | Path) -> list[Path]:
    """Every archive file the views read: those the manifest vouches for, in name order (hourly and compacted
    daily files alike)."""
    return sorted(vouched(root).files)


def sql_string(value: str) -> str:
    """A SQL string literal (single quotes doubled)."""
    return "'" + value.replace("'", "''") + "'"


def views_preamble(root: str | Path, tz: str, files: Sequence[Path] | None = None) -> list[str]:
    """The statements that point ``views.sql`` at an archive (``files``: exactly these files, else every file
    under its date folders) and a budget zone (before it is read)."""
    out = [f"SET VARIABLE archive_root = {sql_string(str(root))}", f"SET VARIABLE budget_tz = {sql_string(tz)}"]
    if files is not None:
        out.append(f"SET VARIABLE archive_paths = {_file_list(files)}")
    return out


def _file_list(files: Sequence[Path]) -> str:
    return "[" + ", ".join(sql_string(str(p)) for p in files) + "]"


def first_unreadable(files: Sequence[Path]) -> str | None:
    """The first file pyarrow cannot read whole, as "<path>: <why>"; None when all read."""
    for path in files:
        try:
            pq.read_table(path)
        except (pa.ArrowException, OSError) as exc:
            return f"{path}: not a readable archive file ({exc})"
    return None


class Warehouse:
    """DuckDB over one archive root, views loaded; ``tz`` is ``budgets.timezone`` (budget months)."""

    def __init__(self, root: str | Path, *, tz: str = "Asia/Kolkata", threads: int | None = None,
                 request_table: bool = True, files: Sequence[Path] | None = None, locked: bool = False) -> None:
        self.root = Path(root)
        self.tz = tz
        self.locked = locked
        # given files (the per-request table's build, over files it just listed as vouched): no second check
        self.vouched: Vouched = vouched(self.root) if files is None else Vouched(self.root, tuple(files), frozenset())
        self.files = sorted(self.vouched.files) if files is None else [Path(f) for f in files]
        if not self.files:
            left = (f"; {self.vouched.left_out} file(s) there are not vouched for by its manifest "
                    f"({self.vouched.warnings[0]})") if self.vouched.left_out else ""
            raise WarehouseError(
                f"the archive at {self.root} is empty: no Parquet files match {self.root}/{ARCHIVE_GLOB}{left}. "
                "Archive the event log first (embedded mode: streams.archive.write.archive_from_log; distributed "
                "mode: the archiver consumer), or pass the right archive folder.")
        self._snapshot_state: tuple[tuple[str, int, int], ...] | None = None  # what requests_snapshot was read from
        self._fixed = files is not None or locked  # never re-listed (``refresh``)
        self._request_table = request_table and files is None
        self._con = duckdb.connect(config={"threads": threads} if threads else {})
        try:
            self._con.execute("SET enable_progress_bar = false")  # output is the result, nothing else
            self._load_views()
            if locked:
                self._lock()
        except duckdb.Error as exc:
            self._con.close()
            raise self._explain(exc) from None

    def _load_views(self) -> None:
        """Point the views at ``self.files`` (and the per-request table, when it is usable and vouched for)."""
        for statement in views_preamble(self.root, self.tz, self.files):
            self._con.execute(statement)
        self._con.execute(VIEWS_SQL.read_text())
        self._con.execute("SELECT ok FROM archive_guard").fetchall()
        # checked once: every later query reads the rows without paying for the footers again
        self._con.execute("CREATE OR REPLACE VIEW archive_rows AS SELECT * FROM archive_scan")
        self.table = None
        if self._request_table:
            sources = [(p.relative_to(self.root).as_posix(), p.stat().st_size) for p in self.files]
            self.table = usable_table(self.root, self.tz, sources, vouched=self.vouched.summary)
        if self.table is not None:
            self._read_table(self.table)

    def refresh(self) -> bool:
        """List the vouched-for files again and re-point the views if they changed (a file archived, compacted
        or expired since); True if they did. A locked warehouse, or one given its files, never changes."""
        if self._fixed:
            return False
        now = vouched(self.root)
        files = sorted(now.files)
        if files == self.files or not files:
            return False
        self.vouched, self.files = now, files
        try:
            self._load_views()
        except duckdb.Error as exc:
            raise self._explain(exc) from None
        return True

    @property
    def warnings(self) -> tuple[str, ...]:
        """The archive files left out of every view (or missing), one line each naming the file."""
        return self.vouched.warnings

    def _lock(self) -> None:
        """File access off except the files the views read; the configuration locked (see the module docstring)."""
        paths = [str(p) for p in self.files]
        if self.table is not None:
            paths += [str(self.table.requests), str(self.table.corrections), str(self.table.entries)]
        self._con.execute(f"SET allowed_paths = {_file_list([Path(p) for p in paths])}")
        self._con.execute("SET enable_external_access = false")
        self._con.execute("SET lock_configuration = true")

    def _read_table(self, table: RequestTable) -> None:
        """Point ``request_base``, ``request_entries`` and ``corrections`` at the per-request table, recomputing
        from the raw events the requests that have an event in a file it does not cover (``reconcile.request_table``)."""
        con, types = self._con, "('request.admitted', 'request.attempted', 'request.settled', 'hold.expired')"
        requests, corrections = sql_string(str(table.requests)), sql_string(str(table.corrections))
        entries = sql_string(str(table.entries))
        if not table.fresh:
            con.execute(f"CREATE OR REPLACE VIEW request_base AS SELECT * FROM read_parquet({requests})")
            con.execute(f"CREATE OR REPLACE VIEW corrections AS SELECT * FROM read_parquet({corrections})")
            con.execute(f"CREATE OR REPLACE VIEW request_entries AS SELECT * FROM read_parquet({entries})")
            return
        con.execute(f"CREATE OR REPLACE VIEW fresh_rows AS SELECT *, (log_partition::HUGEINT << 64) + log_offset AS pos "
                    f"FROM read_parquet({_file_list(table.fresh)}, hive_partitioning = false)")
        con.execute(f"CREATE OR REPLACE TEMP TABLE dirty_ids AS SELECT DISTINCT request_id FROM fresh_rows "
                    f"WHERE type IN {types}")
        con.execute("CREATE OR REPLACE VIEW request_events AS SELECT * FROM request_events_all "
                    "WHERE request_id IN (SELECT request_id FROM dirty_ids)")
        con.execute(f"CREATE OR REPLACE VIEW request_base AS SELECT * FROM read_parquet({requests}) "
                    f"WHERE request_id NOT IN (SELECT request_id FROM dirty_ids) "
                    f"UNION ALL BY NAME SELECT * FROM request_rows")
        con.execute("CREATE OR REPLACE VIEW entry_requests AS SELECT * FROM request_base "
                    "WHERE request_id IN (SELECT request_id FROM dirty_ids)")
        con.execute(f"CREATE OR REPLACE VIEW request_entries AS SELECT * FROM read_parquet({entries}) "
                    f"WHERE request_id NOT IN (SELECT request_id FROM dirty_ids) "
                    f"UNION ALL BY NAME SELECT * FROM request_entry_rows")
        con.execute("CREATE OR REPLACE VIEW correction_events AS SELECT id, request_id, pos, team, currency, "
                    "event_time, cost_micro, scope_costs, event FROM fresh_rows WHERE type = 'rating.corrected'")
        con.execute(f"CREATE OR REPLACE VIEW corrections AS SELECT * FROM (SELECT * FROM read_parquet({corrections}) "
                    f"UNION ALL BY NAME SELECT * FROM correction_rows) "
                    f"QUALIFY row_number() OVER (PARTITION BY id ORDER BY pos) = 1")

    def close(self) -> None:
        self._con.close()

    def __enter__(self) -> Warehouse:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def query(self, sql: str, params: Sequence[Any] | dict[str, Any] | None = None) -> Result:
        """Run one SQL statement over the views; ``WarehouseError`` (naming the file, if one is at fault)."""
        if self.locked:
            self._check_read_only(sql)
        try:
            cursor = self._con.execute(sql, params) if params is not None else self._con.execute(sql)
            if cursor.description is None:
                return Result((), [])
            columns = tuple(d[0] for d in cursor.description)
            return Result(columns, cursor.fetchall())
        except duckdb.Error as exc:
            raise self._explain(exc) from None

    @staticmethod
    def _check_read_only(sql: str) -> None:
        try:
            statements = duckdb.extract_statements(sql)
        except duckdb.Error as exc:
            raise WarehouseError(str(exc).strip()) from None
        for statement in statements:
            if statement.type not in READ_ONLY_STATEMENTS:
                kind = statement.type.name.replace("_", " ")
                raise WarehouseError(f"the finance shell reads the ledger only: a {kind} statement is not run "
                                     f"(export a result with --out FILE)")

    def arrow(self, sql: str) -> pa.Table:
        """Run one SQL statement over the views; its answer as an Arrow table."""
        if self.locked:
            self._check_read_only(sql)
        try:
            return self._con.sql(sql).to_arrow_table()
        except duckdb.Error as exc:
            raise self._explain(exc) from None

    def register(self, name: str, table: pa.Table) -> None:
        """Make an Arrow table (e.g. the budget limits) queryable as ``name`` beside the views."""
        self._con.register(name, table)

    def archive_state(self) -> tuple[tuple[str, int, int], ...]:
        """What the views would read now (``refresh`` first): every vouched file's name, size and modification
        time. Archive files are immutable (written once, then only listed, replaced by compaction or expired),
        so an equal state means equal rows."""
        self.refresh()
        out = []
        for path in self.files:
            try:
                st = path.stat()
            except FileNotFoundError:  # removed by compaction or retention while listing: not part of the state
                continue
            out.append((str(path), st.st_size, st.st_mtime_ns))
        return tuple(out)

    def pin_requests(self) -> None:
        """Shadow the ``requests`` and ``scope_balances`` views with snapshots of them for this session, so every
        view built on ``requests`` (``ledger_entries``, ``minute_rollups``, ``daily_cost``) and the balances read
        the snapshots instead of re-reading the archive: for reports that query several views at one moment.

        The snapshots (``temp.<view>_snapshot``) are computed once and reused by later pins while the archive's
        files are unchanged (``archive_state``); a new, compacted or expired file makes the next pin compute them
        again. The state is taken before they are computed, so a file that lands meanwhile makes the next pin
        recompute (never a stale reuse)."""
        # a per-request table covering every file already is a snapshot of requests: keep the balances only
        pinned = PINNED[1:] if self.table is not None and not self.table.fresh else PINNED
        state = self.archive_state()
        if state != self._snapshot_state:
            self._snapshot_state = None
            self.unpin_requests()
            for view in pinned:  # in order: scope_balances' snapshot is read from the requests snapshot
                self.query(f"CREATE OR REPLACE TEMP TABLE {view}_snapshot AS SELECT * FROM {view}")
                self.query(f"CREATE OR REPLACE TEMP VIEW {view} AS SELECT * FROM temp.{view}_snapshot")
            self._snapshot_state = state
            return
        for view in pinned:
            self.query(f"CREATE OR REPLACE TEMP VIEW {view} AS SELECT * FROM temp.{view}_snapshot")

    def unpin_requests(self) -> None:
        """Read the archive again (the snapshots are kept for the next ``pin_requests`` while the files are
        unchanged)."""
        for view in PINNED:
            self.query(f"DROP VIEW IF EXISTS temp.{view}")

    def months(self) -> list[str]:
        """The budget months that have admissions, oldest first."""
        return [row[0] for row in self.query("SELECT DISTINCT month FROM requests ORDER BY month").rows]

    def _explain(self, exc: duckdb.Error) -> WarehouseError:
        message = str(exc).strip()
        if isinstance(exc, duckdb.PermissionException):
            return WarehouseError(f"the finance shell reads the archive's vouched-for files only: {message}")
        if isinstance(exc, _QUERY_ERRORS) or "archive schema" in message:
            return WarehouseError(message)
        if not any(str(path) in message for path in self.files):  # DuckDB did not say which file
            culprit = first_unreadable(self.files)
            if culprit is not None:
                return WarehouseError(culprit)
        return WarehouseError(f"the archive at {self.root} cannot be read: {message}")


_QUERY_ERRORS = (duckdb.ParserException, duckdb.BinderException, duckdb.CatalogException, duckdb.ConversionException,
                 duckdb.InvalidTypeException, duckdb.TypeMismatchException, duckdb.OutOfRangeException,
                 duckdb.NotImplementedException)
"""Errors of the query itself (not of the archive): shown as DuckDB words them."""
