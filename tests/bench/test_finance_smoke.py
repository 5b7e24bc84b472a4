"""``make bench-finance`` at a tiny size: the month is generated, every figure is measured, nothing is timed."""

from __future__ import annotations

import json
from pathlib import Path

from reconcile.warehouse import Warehouse
from tests.bench.finance.run import main
from tests.bench.finance.synthetic import MONTH, generate


def test_the_synthetic_month_is_a_valid_archive(tmp_path: Path) -> None:
    made = generate(tmp_path, 3_000, days=3)
    assert 2_800 <= made["events"] <= 3_200 and made["files"] > 0
    with Warehouse(tmp_path) as wh:  # the archive guard accepts every file: the exact archive row and metadata
        states = dict(wh.query("SELECT state, count(*) FROM requests GROUP BY state").rows)
        assert sum(states.values()) == made["requests"] and states["settled"] > 0
        [(month,)] = wh.query("SELECT DISTINCT month FROM requests").rows
        assert month == MONTH
        balances = wh.query("SELECT sum(settled_micro) FROM scope_balances WHERE scope LIKE 'team:%'").rows[0][0]
        spend = wh.query("SELECT sum(cost_micro) FROM requests WHERE state <> 'open'").rows[0][0]
        assert balances == spend > 0  # each request charges its own team


def test_the_bench_reports_every_figure(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "finance.json"
    assert main(["--events", "3000", "--days", "2", "--writer-events", "600", "--folder", str(tmp_path / "month"),
                 "--json", str(out), "--raw-cold"]) == 0
    rep = json.loads(out.read_text())
    assert rep["archive_writer"]["events_per_s"] > 0 and rep["archive_writer"]["mb_per_million_events"] > 0
    assert rep["archive_writer"]["trusted_events_per_s"] > 0 and rep["request_table"]["built"]
    assert rep["showback"]["by_team_rows"] > 0 and rep["showback"]["daily_cost_agrees"]
    assert rep["showback"]["request_table"] and rep["showback"]["raw_agrees"]
    assert "measured" in rep["focus"]
    rr = rep["rerate"]  # main() returned 0: every request accounted for, only the changed deployment moved
    assert rr["requests"] == rr["admitted"] > 0 and rr["corrections"] > 0 and rr["diff_micro"] > 0
    rc = rep["reconcile"]  # one UTC day against its simulator usage export: exact, then every count x0.97
    assert rc["day"] == "2026-10-01" and rc["exact"]["rows"] > 0 and rc["exact"]["flagged"] == 0
    assert rc["scaled"]["flagged"] == rc["scaled"]["rows"] == rc["exact"]["rows"]
    assert 2.5 <= rc["scaled"]["flagged_pct_min"] <= rc["scaled"]["flagged_pct_max"] <= 3.5
    cx = rep["connectors"]  # the same day as each export connector would export it, exactly: nothing flagged
    assert all(cx[name]["rows"] > 0 and cx[name]["flagged"] == 0 for name in ("openai", "anthropic", "aws",
                                                                               "google", "azure")), cx
    printed = capsys.readouterr().out
    assert "one day's reconciliation per export connector" in printed
    assert "events/s" in printed and "showback" in printed and "FOCUS export" in printed
    assert "re-rating the month" in printed
    assert "one day's reconciliation (2026-10-01, simulator usage export)" in printed and "0 flagged" in printed
    assert main(["--events", "3000", "--days", "2", "--writer-events", "600", "--folder", str(tmp_path / "month"),
                 "--json", str(out)]) == 0  # the month is reused
    assert json.loads(out.read_text())["month"]["reused"]
