"""The warehouse views on a hand-written month; unreadable archives are refused, naming the file."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ledger.balances import Ledger
from reconcile.warehouse import VIEWS, VIEWS_ARCHIVE_SCHEMA, VIEWS_SQL, Warehouse, WarehouseError, views_preamble
from streams.archive.schema import ARCHIVE_SCHEMA_VERSION, SCHEMA_METADATA_KEY
from tests.reconcile.duckdb_shell import duckdb_cli
from tests.reconcile.warehouse_fixtures import month_events, write_archive
from tests.reconcile.warehouse_streams import IST
from tests.streams.relist import relist


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    return write_archive(tmp_path / "archive")


def _one_file(root: Path) -> Path:
    return sorted(root.glob("date=*/**/*.parquet"))[0]


def test_the_views_read_the_archive_schema_streams_writes() -> None:
    assert VIEWS_ARCHIVE_SCHEMA == ARCHIVE_SCHEMA_VERSION
    assert f"WHEN archive_schema = {ARCHIVE_SCHEMA_VERSION} THEN true" in VIEWS_SQL.read_text()


def test_every_view_answers(archive: Path) -> None:
    with Warehouse(archive) as wh:
        for view in VIEWS:  # the month was never re-rated: corrections is the one empty view
            assert (wh.query(f"SELECT count(*) FROM {view}").rows[0][0] > 0) is (view != "corrections"), view


def test_requests_join_admission_attempts_and_close_in_budget_months(archive: Path) -> None:
    with Warehouse(archive) as wh:
        rows = {r["request_id"]: r for r in wh.query("SELECT * FROM requests").dicts()}
    assert set(rows) == {"r1", "r2", "r3", "r4", "r5", "s1"}
    assert rows["r1"]["month"] == "2026-11" and rows["r1"]["closed_at"].astimezone(IST).month == 12  # charged to its admission
    assert rows["r2"]["month"] == "2026-12" and rows["r2"]["overrun_micro"] == 2_000
    r3 = rows["r3"]
    assert (r3["attempts"], r3["first_deployment"], r3["deployment"], r3["model"]) == (2, "d-oai", "d-ant", "model-d-ant")
    assert r3["fallback"] and not rows["r2"]["fallback"]
    assert (rows["r4"]["state"], rows["r4"]["cost_micro"], rows["r4"]["served"]) == ("expired", 5_000, False)
    assert (rows["r5"]["state"], rows["r5"]["cost_micro"]) == ("open", 0)
    assert rows["r1"]["input_tokens"] == 1_000 and rows["r1"]["reasoning_tokens"] == 50


def test_scope_balances_equal_the_ledger_fold(archive: Path) -> None:
    ledger = Ledger(IST)
    for event in month_events():
        ledger.apply(event)
    expected = {k: (b.settled, b.held, b.overrun, b.requests) for k, b in ledger.balances().items()}
    with Warehouse(archive) as wh:
        rows = wh.query("SELECT scope, balance_period, settled_micro, held_micro, overrun_micro, requests "
                        "FROM scope_balances").rows
    got = {(scope, period): tuple(v) for scope, period, *v in rows}
    assert got == expected
    assert got[("team:payments", "2026-11")] == (7_000, 0, 0, 1)
    assert got[("team:payments", "2026-12")] == (32_000, 3_000, 2_000, 4)
    assert got[("run:agent-7", "run")] == (2_500, 0, 0, 1)


def test_ledger_entries_and_daily_cost_add_up(archive: Path) -> None:
    with Warehouse(archive) as wh:
        entries = wh.query("SELECT entry, count(*) FROM ledger_entries WHERE scope = 'team:payments' "
                           "GROUP BY entry ORDER BY entry").rows
        daily = wh.query("SELECT sum(cost_micro), sum(requests) FROM daily_cost WHERE team = 'payments'").rows[0]
        spend = wh.query("SELECT sum(cost_micro), count(*) FROM requests WHERE team = 'payments'").rows[0]
    assert entries == [("expiry", 1), ("hold", 5), ("settlement", 3)]
    assert daily == spend == (39_000, 5)


def test_duplicates_across_hourly_and_compacted_files_count_once(archive: Path) -> None:
    with Warehouse(archive) as wh:
        before = wh.query("SELECT * FROM scope_balances ORDER BY scope, balance_period").rows
    for day in archive.glob("date=*"):  # compaction's daily file beside the hourly files it replaces
        hourly = sorted(day.glob("hour=*/*.parquet"))
        table = pa.concat_tables(pq.ParquetFile(f).read() for f in hourly)
        pq.write_table(table, day / "compacted-0.parquet")
        relist(archive, day / "compacted-0.parquet")  # listed, as compaction lists its output
    with Warehouse(archive) as wh:
        assert wh.query("SELECT count(*) FROM archive_rows").rows[0][0] == 2 * len(month_events())
        assert wh.query("SELECT count(*) FROM events").rows[0][0] == len(month_events())
        assert wh.query("SELECT * FROM scope_balances ORDER BY scope, balance_period").rows == before


def test_files_the_manifest_does_not_vouch_for_are_left_out_and_named(archive: Path) -> None:
    """A foreign file dropped in (a forged request) and a file rewritten in place (a changed row) are read by no
    view; the warehouse names both, and the totals are those of the vouched files alone."""
    with Warehouse(archive) as wh:
        before = wh.query("SELECT team, sum(cost_micro) FROM requests GROUP BY 1 ORDER BY 1").rows
        assert wh.warnings == ()
    victim = _one_file(archive)
    table = pq.read_table(victim)
    forged = table.set_column(table.schema.get_field_index("cost_micro"), "cost_micro",
                              pa.array([9_999_999] * table.num_rows, pa.int64()))
    foreign = victim.with_name("part-0-forged.parquet")
    pq.write_table(forged.set_column(forged.schema.get_field_index("id"), "id",
                                     pa.array([f"forged-{n}" for n in range(table.num_rows)])), foreign)
    pq.write_table(forged, victim)
    with Warehouse(archive) as wh:
        rel = lambda p: p.relative_to(archive).as_posix()  # noqa: E731
        assert any(w.startswith(f"unlisted: {rel(foreign)}") for w in wh.warnings), wh.warnings
        assert any(w.startswith(f"changed: {rel(victim)}") for w in wh.warnings), wh.warnings
        assert wh.vouched.left_out == 2
        files = {r[0] for r in wh.query("SELECT DISTINCT filename FROM read_parquet(getvariable('archive_paths'), "
                                        "filename = true)").rows}
        assert str(foreign) not in files and str(victim) not in files
        after = wh.query("SELECT team, sum(cost_micro) FROM requests GROUP BY 1 ORDER BY 1").rows
        assert 9_999_999 not in {v for _, v in after}
        assert sum(v for _, v in after) <= sum(v for _, v in before)


def test_an_empty_archive_is_refused(tmp_path: Path) -> None:
    with pytest.raises(WarehouseError, match="is empty: no Parquet files"):
        Warehouse(tmp_path)


def test_a_truncated_file_is_named(archive: Path) -> None:
    """A file listed as it is (a writer that listed a bad file) but unreadable is named."""
    path = _one_file(archive)
    path.write_bytes(path.read_bytes()[:200])
    relist(archive, path)
    with pytest.raises(WarehouseError, match=str(path)):
        Warehouse(archive).query("SELECT count(*) FROM requests")


def test_a_corrupt_data_page_is_named(archive: Path) -> None:
    path = _one_file(archive)
    data = bytearray(path.read_bytes())
    for at in range(100, len(data) // 2, 97):  # flip bytes in the column chunks, leave the footer readable
        data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    relist(archive, path)
    with pytest.raises(WarehouseError, match=str(path)):
        Warehouse(archive).query("SELECT sum(cost_micro), max(event) FROM events")


@pytest.mark.parametrize(("version", "words"), [(ARCHIVE_SCHEMA_VERSION + 1, "is newer than"), (None, "no typed")])
def test_a_file_of_another_archive_schema_is_named(archive: Path, version: int | None, words: str) -> None:
    path = _one_file(archive)
    table = pq.read_table(path)
    metadata = dict(table.schema.metadata or {})
    metadata.pop(SCHEMA_METADATA_KEY, None)
    if version is not None:
        metadata[SCHEMA_METADATA_KEY] = str(version).encode()
    other = path.with_name("part-9-other.parquet")
    pq.write_table(table.replace_schema_metadata(metadata), other)
    relist(archive, other)  # as a newer (or an older) farebox would list it
    with pytest.raises(WarehouseError, match=f"{other}.*{words}"):
        Warehouse(archive).query("SELECT count(*) FROM requests")


def test_the_plain_duckdb_cli_gives_the_same_numbers(archive: Path) -> None:
    """Finance's way in: the duckdb shell, the views file, no farebox process."""
    sql = "SELECT scope, balance_period, settled_micro, held_micro FROM scope_balances ORDER BY 1, 2"
    with Warehouse(archive) as wh:
        expected = [",".join(str(v) for v in row) for row in wh.query(sql).rows]
    argv = [duckdb_cli(), "-csv", "-noheader"]
    for statement in views_preamble(archive, "Asia/Kolkata"):
        argv += ["-c", statement]
    out = subprocess.run([*argv, "-c", f".read {VIEWS_SQL}", "-c", sql], capture_output=True, text=True, check=True)
    assert out.stdout.split() == expected


def test_finance_shell_answers_from_the_views_and_reaches_nothing_else(archive: Path, tmp_path: Path) -> None:
    """``farebox finance shell``: multi-line statements, .format and .out; a COPY, a read outside the archive and a
    setting change are refused with one line each, and the session goes on."""
    secret = tmp_path / "secret.txt"
    secret.write_text("provider-key-123\n")
    script = (".format csv\nSELECT settled_micro FROM scope_balances\n"
              "WHERE scope = 'team:payments' AND balance_period = '2026-12';\n"
              f"SELECT * FROM read_text('{secret}');\n"
              f"COPY (SELECT 1) TO '{tmp_path / 'copy.csv'}';\n"
              f"COPY (SELECT 2 AS a) TO '{_one_file(archive)}' (FORMAT parquet, USE_TMP_FILE false);\n"
              "SET enable_external_access = true;\n"
              f".out {tmp_path / 'teams.csv'}\nSELECT team, count(*) AS n FROM requests GROUP BY 1 ORDER BY 1;\n"
              "SELECT 41 + 1 AS answer;\n")
    before = _one_file(archive).read_bytes()
    out = subprocess.run([sys.executable, "-m", "farebox", "finance", "shell", "--archive", str(archive)],
                         input=script, capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "32000" in out.stdout.split() and "42" in out.stdout.split()
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 4, out.stderr
    assert "vouched-for files only" in errors[0] and "provider-key-123" not in out.stdout + out.stderr
    assert all("COPY statement is not run" in e for e in errors[1:3]) and "SET statement is not run" in errors[3]
    assert not (tmp_path / "copy.csv").exists() and _one_file(archive).read_bytes() == before
    assert (tmp_path / "teams.csv").read_text().splitlines()[0] == "team,n"


def test_finance_sql_is_locked_and_exports_through_out(archive: Path, tmp_path: Path) -> None:
    """``farebox finance sql``: reads outside the archive and writes anywhere are refused (exit 1, one line);
    ``--out`` writes the result as CSV, JSON or Parquet."""
    def sql(query: str, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "farebox", "finance", "sql", query, "--archive",
                               str(archive), *extra], capture_output=True, text=True, cwd=tmp_path, timeout=60)

    for query in ("SELECT * FROM read_text('/etc/hostname')", "SELECT * FROM read_csv('/etc/passwd')",
                  f"COPY (SELECT * FROM events) TO '{tmp_path / 'all.parquet'}'",
                  f"ATTACH '{tmp_path / 'x.duckdb'}'", "INSTALL httpfs", "SELECT 1; COPY (SELECT 1) TO 'y.csv'"):
        done = sql(query)
        assert done.returncode == 1 and done.stderr.startswith("error: "), (query, done.stderr)
    assert [p.name for p in tmp_path.iterdir()] == ["archive"]  # nothing written beside it
    done = sql("SELECT team, sum(cost_micro) AS spend_micro FROM requests GROUP BY 1 ORDER BY 1", "--format", "json",
               "--out", str(tmp_path / "spend.json"))
    assert done.returncode == 0 and "row(s) written" in done.stderr
    assert json.loads((tmp_path / "spend.json").read_text())[0]["team"]
    assert sql("SELECT * FROM events", "--out", str(tmp_path / "events.parquet")).returncode == 0
    assert pq.read_table(tmp_path / "events.parquet").num_rows == len(month_events())


def test_views_are_re_pointed_by_the_variable(archive: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    shutil.copytree(archive, other)
    with Warehouse(archive) as wh:
        wh.query("SET VARIABLE archive_root = ?", [str(other)])
        assert wh.query("SELECT count(*) FROM events").rows[0][0] == len(month_events())


def test_finance_shell_at_a_terminal_answers_and_ends_at_ctrl_d(archive: Path, tmp_path: Path) -> None:
    """On a terminal (a pseudo-terminal here): the prompt, an answer, and Ctrl-D ends the session with 0."""
    import os
    import pty
    import select
    import time

    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "farebox", "finance", "shell", "--archive", str(archive)],
                            stdin=follower, stdout=follower, stderr=follower, cwd=tmp_path, close_fds=True)
    os.close(follower)
    seen = b""

    def read_until(marker: bytes, timeout: float = 30.0) -> None:
        nonlocal seen
        deadline = time.monotonic() + timeout
        while marker not in seen and time.monotonic() < deadline:
            if select.select([leader], [], [], 0.2)[0]:
                try:
                    seen += os.read(leader, 65536)
                except OSError:
                    break
        assert marker in seen, seen.decode(errors="replace")

    try:
        read_until(b"finance> ")
        os.write(leader, b".format csv\nSELECT 40 + 2 AS answer;\n")
        read_until(b"42")
        seen = seen[seen.index(b"42"):]
        read_until(b"finance> ")  # the next prompt: the shell is reading again
        os.write(leader, b"\x04")  # Ctrl-D
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(leader)
