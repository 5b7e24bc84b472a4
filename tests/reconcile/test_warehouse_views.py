"""The warehouse views on a hand-written month; unreadable archives are refused, naming the file."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from farebox.cli.finance import duckdb_cli, shell_argv
from ledger.balances import Ledger
from reconcile.warehouse import VIEWS, VIEWS_ARCHIVE_SCHEMA, VIEWS_SQL, Warehouse, WarehouseError, views_preamble
from streams.archive.schema import ARCHIVE_SCHEMA_VERSION, SCHEMA_METADATA_KEY
from tests.reconcile.warehouse_fixtures import month_events, write_archive
from tests.reconcile.warehouse_streams import IST


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
    with Warehouse(archive) as wh:
        assert wh.query("SELECT count(*) FROM archive_rows").rows[0][0] == 2 * len(month_events())
        assert wh.query("SELECT count(*) FROM events").rows[0][0] == len(month_events())
        assert wh.query("SELECT * FROM scope_balances ORDER BY scope, balance_period").rows == before


def test_an_empty_archive_is_refused(tmp_path: Path) -> None:
    with pytest.raises(WarehouseError, match="is empty: no Parquet files"):
        Warehouse(tmp_path)


def test_a_truncated_file_is_named(archive: Path) -> None:
    path = _one_file(archive)
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(WarehouseError, match=str(path)):
        Warehouse(archive).query("SELECT count(*) FROM requests")


def test_a_corrupt_data_page_is_named(archive: Path) -> None:
    path = _one_file(archive)
    data = bytearray(path.read_bytes())
    for at in range(100, len(data) // 2, 97):  # flip bytes in the column chunks, leave the footer readable
        data[at] ^= 0xFF
    path.write_bytes(bytes(data))
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


def test_finance_shell_opens_duckdb_with_the_views(archive: Path, tmp_path: Path) -> None:
    argv = shell_argv(duckdb_cli(), archive, "Asia/Kolkata")
    out = subprocess.run([*argv, "-csv"], input="SELECT settled_micro FROM scope_balances "
                         "WHERE scope = 'team:payments' AND balance_period = '2026-12';\n",
                         capture_output=True, text=True, check=True, cwd=tmp_path)  # any folder: paths are absolute
    assert out.stdout.split()[-1] == "32000"


def test_views_are_re_pointed_by_the_variable(archive: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    shutil.copytree(archive, other)
    with Warehouse(archive) as wh:
        wh.query("SET VARIABLE archive_root = ?", [str(other)])
        assert wh.query("SELECT count(*) FROM events").rows[0][0] == len(month_events())
