"""``farebox report showback`` and ``farebox finance sql`` from the command line: limits from the config
database, the archive beside the state, and every bad input a clear line on stderr with exit 1."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from farebox.cli import main
from tests.harness import test_config as write_config
from tests.reconcile.warehouse_fixtures import write_archive
from tests.streams.relist import relist


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = write_config(tmp_path, sim_port=9, gw_port=9)  # nothing is served: the CLI only reads
    write_archive(tmp_path / "archive")  # <state_dir>/archive, the default
    assert main(["teams", "set", "payments", "--business-unit", "retail", "--config", str(path)]) == 0
    assert main(["budgets", "set", "team:payments", "--monthly-limit", "0.035", "--soft-pct", "50",
                 "--config", str(path)]) == 0
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_showback_takes_limits_from_the_config_database(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "report", "showback", "--config", str(config), "--month", "2026-12", "--format", "json")
    assert code == 0
    rows = {r["team"]: r for r in json.loads(out)}
    pay = rows["payments"]
    assert (pay["budget_limit_micro"], pay["budget_settled_micro"], pay["budget_held_micro"]) == (35_000, 32_000, 3_000)
    assert pay["budget_state"] == "exhausted"
    assert rows["search"]["budget_state"] == "unlimited"


def test_showback_formats(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "report", "showback", "--config", str(config), "--month", "2026-12",
                        "--by", "team,app", "--format", "csv")
    assert code == 0 and out.splitlines()[0].startswith("team,app,requests,")
    assert len(out.splitlines()) == 1 + 3  # payments/bot, payments/web, search/bot
    code, out, _ = _run(capsys, "report", "showback", "--config", str(config), "--month", "2026-11")
    assert code == 0 and "payments" in out and "(1 row)" in out


@pytest.mark.parametrize(("argv", "words"), [
    (["--month", "2026-12", "--by", "team,colour"], "unknown group-by column 'colour'"),
    (["--month", "2026-09"], "no requests admitted in 2026-09"),
    (["--month", "December"], "month must look like YYYY-MM"),
])
def test_showback_bad_input(config: Path, capsys: pytest.CaptureFixture[str], argv: list[str], words: str) -> None:
    code, out, err = _run(capsys, "report", "showback", "--config", str(config), *argv)
    assert code == 1 and out == ""
    assert err.startswith("error: ") and words in err


def test_an_empty_archive_is_an_error(config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = _run(capsys, "report", "showback", "--config", str(config), "--month", "2026-12",
                        "--archive", str(empty))
    assert code == 1 and f"the archive at {empty} is empty" in err


def test_finance_sql(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sql = "SELECT scope, settled_micro FROM scope_balances WHERE balance_period = '2026-12' ORDER BY scope"
    code, out, _ = _run(capsys, "finance", "sql", sql, "--config", str(config), "--format", "csv")
    assert code == 0
    assert "team:payments,32000" in out.splitlines()
    code, _, err = _run(capsys, "finance", "sql", "SELECT nope FROM requests", "--config", str(config))
    assert code == 1 and 'column "nope" not found' in err


def test_finance_sql_names_a_truncated_file(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Truncated in place: the manifest no longer vouches for it, so it is left out and named; listed so (a
    writer that listed a bad file), reading it fails naming it."""
    root = config.parent / "archive"
    path = sorted(root.glob("date=*/**/*.parquet"))[-1]
    code, whole, _ = _run(capsys, "finance", "sql", "SELECT count(*) FROM events", "--config", str(config),
                          "--format", "csv")
    assert code == 0
    rows = pq.read_metadata(path).num_rows
    path.write_bytes(path.read_bytes()[:-50])
    code, out, err = _run(capsys, "finance", "sql", "SELECT count(*) FROM events", "--config", str(config),
                          "--format", "csv")
    assert code == 0 and f"warning: changed: {path.relative_to(root).as_posix()}" in err
    assert int(out.split()[-1]) == int(whole.split()[-1]) - rows
    relist(root, path)
    code, _, err = _run(capsys, "finance", "sql", "SELECT count(*) FROM events", "--config", str(config))
    assert code == 1 and str(path) in err


def test_finance_needs_a_config_or_an_archive(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "finance", "sql", "SELECT 1")
    assert code == 1 and "pass --config PATH" in err
