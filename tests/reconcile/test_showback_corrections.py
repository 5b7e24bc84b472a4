"""After an applied re-rate, showback and the warehouse views show corrected figures, and say by how much."""

from __future__ import annotations

from datetime import date, datetime, timezone
from zoneinfo import ZoneInfo

from farebox.cli import main
from ledger.balances import Ledger
from ledger.codec import encode
from ledger.events import RatingCorrected, RequestAdmitted
from ledger.periods import period_of
from reconcile.rerate.archive import plan_rerate
from reconcile.showback import showback
from reconcile.warehouse import Warehouse
from streams.archive.write import ArchiveWriter, Record
from tests.reconcile.focus_archive import FX, example_config, month_events, write_archive
from tests.reconcile.rerate_fixtures import BOOK4

TZ = ZoneInfo("Asia/Kolkata")
NOW = datetime(2026, 12, 5, 9, 0, tzinfo=timezone.utc)
MONTH = "2026-11"


def test_showback_and_scope_balances_include_applied_corrections(tmp_path):
    events = month_events(count=80)
    root = write_archive(tmp_path / "archive", events)
    with Warehouse(root) as wh:
        before = {r["team"]: r for r in showback(wh, MONTH, ["team"]).dicts()}
    fixes: list[RatingCorrected] = []
    for version in (3, 4):  # a chain: v3 then v4, each relative to the last
        step = plan_rerate(root, date(2026, 11, 1), date(2026, 11, 30), BOOK4, FX, version, now=NOW).corrections
        records = [Record(0, 10**6 + len(fixes) + n, encode(f)) for n, f in enumerate(step)]
        ArchiveWriter(root, "log").write(records + records[:3])  # a redelivered correction counts once
        fixes += step
    assert fixes and {f.sequence for f in fixes} >= {1, 2}

    ledger = Ledger(TZ)
    for event in [*events, *fixes]:
        ledger.apply(event)
    admitted = {e.request_id: e for e in events if isinstance(e, RequestAdmitted)}
    in_month = [f for f in fixes if period_of(admitted[f.request_id].time, TZ) == MONTH]
    with Warehouse(root) as wh:
        rows = {r["team"]: r for r in showback(wh, MONTH, ["team"]).dicts()}
        balances = dict(wh.query("SELECT scope, settled_micro FROM scope_balances WHERE balance_period = $m",
                                 {"m": MONTH}).rows)
        assert wh.query("SELECT count(*) FROM corrections").rows[0][0] == len(fixes)
    for team, row in rows.items():
        mine = [f for f in in_month if f.team == team]
        assert row["corrected_micro"] == sum(f.cost_micro - f.old_cost_micro for f in mine)
        assert row["spend_micro"] == before[team]["spend_micro"] + row["corrected_micro"]  # the corrected spend
        # the budget columns are the ledger's: corrections folded into settled money, to the micro-unit
        assert row["budget_settled_micro"] == balances[f"team:{team}"] == ledger.balance(f"team:{team}", MONTH).settled
    assert sum(r["corrected_micro"] for r in rows.values()) == sum(f.cost_micro - f.old_cost_micro for f in in_month) != 0
    for scope, settled in balances.items():  # every scope the corrections touched, keys and business units too
        assert settled == ledger.balance(scope, MONTH).settled, scope


def test_the_showback_command_says_which_figures_are_corrected(tmp_path, capsys):
    events = month_events(count=20)
    root = write_archive(tmp_path / "archive", events)
    args = ["report", "showback", "--config", str(example_config(tmp_path)), "--archive", str(root), "--month", MONTH, "--format", "csv"]
    assert main(args) == 0
    assert "re-rating" not in capsys.readouterr().err  # nothing corrected yet: no note
    fixes = plan_rerate(root, date(2026, 11, 1), date(2026, 11, 30), BOOK4, FX, 3, now=NOW).corrections
    ArchiveWriter(root, "log").write([Record(0, 10**6 + n, encode(f)) for n, f in enumerate(fixes)])
    assert main(args) == 0
    out = capsys.readouterr()
    assert "corrected_micro" in out.out.splitlines()[0]
    assert "include re-rating corrections: spend_micro and the budget_* columns are corrected figures" in out.err
