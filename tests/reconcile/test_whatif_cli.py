"""``farebox whatif``: the proposal is checked like ``config check`` (every problem, nothing run), then replayed."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from pathlib import Path

import orjson
import pytest
import yaml

from farebox.cli import main
from ledger.admission import ScopeLimit
from ledger.refusals import RequestRefused
from tests.reconcile.whatif_traffic import UTC, Ask, Budgets, archive, run_gateway

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "farebox.yaml"
INR = 1_000_000

# The budgets really in force while the traffic ran, as the config's budgets section and as values.
CURRENT = {
    "timezone": "Asia/Kolkata",
    "per_request_cap": "3.50",
    "runs": {"limit": "3.00", "max_calls": 4},
    "scopes": [{"scope": "team:platform", "monthly_limit": "40.00"},
               {"scope": "bu:payments", "monthly_limit": "30.00", "soft_pct": 90}],
}
REAL = Budgets(scopes={"team:platform": ScopeLimit(40 * INR), "bu:payments": ScopeLimit(30 * INR, 90)},
               run_default=ScopeLimit(3 * INR, max_calls=4), cap=35 * INR // 10)


@pytest.fixture
def setup(tmp_path):
    """The example config (state in tmp) and an archive of 1..14 November under ``REAL``."""
    tree = yaml.safe_load(EXAMPLE.read_text())
    tree["secrets_file"] = str(ROOT / "examples" / "secrets.env")
    tree["state_dir"] = str(tmp_path / "state")
    config = tmp_path / "farebox.yaml"
    config.write_text(yaml.safe_dump(tree))
    rng = random.Random(4)
    teams = {"platform": "retail", "kyc-ops": "payments"}
    start = datetime(2026, 11, 1, tzinfo=UTC)
    asks = []
    for i in range(300):
        team = rng.choice(sorted(teams))
        hold = rng.choice((2, 3, 5, 40)) * INR // 10
        asks.append(Ask(request_id=f"req-{i:03d}", at=start + timedelta(seconds=rng.uniform(0, 14 * 86400)),
                        key=f"fb-{team}-{rng.randrange(2)}", team=team, bu=teams[team], hold=hold,
                        cost=rng.randint(0, hold), run=f"run-{i % 40}" if i % 3 == 0 else None))
    events = run_gateway(asks, REAL)
    archive(tmp_path / "state" / "archive", events, batch=500)
    current = tmp_path / "current.yaml"
    current.write_text(yaml.safe_dump({"budgets": CURRENT}))
    return config, events, current


def test_the_current_budgets_reproduce_the_real_refusals_as_json(setup, capsys):
    config, events, current = setup
    code = main(["whatif", "--config", str(config), "--budgets", str(current), "--from", "2026-11-03",
                 "--to", "2026-11-12", "--format", "json"])
    assert code == 0
    doc = orjson.loads(capsys.readouterr().out)
    start, end = datetime(2026, 11, 3, tzinfo=UTC), datetime(2026, 11, 13, tzinfo=UTC)
    real = sorted(e.request_id for e in events if isinstance(e, RequestRefused) and start <= e.time < end)
    assert len(real) > 20
    assert sorted(r["request_id"] for r in doc["refusals"]) == real
    assert doc["totals"]["same_as_reality"] is True and doc["changes"] == []
    assert doc["totals"]["difference_micro"] == 0 and doc["currency"] == "INR"


def test_a_tighter_proposal_is_a_table_of_scopes(setup, tmp_path, capsys):
    config, _, _ = setup
    proposed = tmp_path / "proposed.yaml"
    proposed.write_text(yaml.safe_dump({**CURRENT, "scopes": [
        *CURRENT["scopes"], {"scope": "bu:retail", "monthly_limit": "10.00"}]}))  # the section itself
    code = main(["whatif", "--config", str(config), "--budgets", str(proposed), "--from", "2026-11-01",
                 "--to", "2026-11-14"])
    assert code == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("bu:retail"))
    assert int(line.split()[2]) > 0  # refused under the proposal
    assert "newly refused" in out and "difference" in out


def test_a_proposal_with_errors_lists_every_problem_and_runs_nothing(setup, tmp_path, capsys):
    config, _, _ = setup
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"budgets": {
        "timezone": "Mars/Olympus",
        "runs": {"limit": "lots"},
        "scopes": [{"scope": "team:nobody", "monthly_limit": "10.00"},
                   {"scope": "bu:retail", "monthly_limit": "5.00", "soft_pct": 120},
                   {"scope": "platform", "monthly_limit": "1.00"},
                   {"monthly_limit": "1.00", "colour": "red"}],
    }}))
    code = main(["whatif", "--config", str(config), "--budgets", str(bad), "--from", "2026-11-01",
                 "--to", "2026-11-14"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    err = captured.err
    for problem in ("budgets.timezone: unknown time zone 'Mars/Olympus'", "budgets.runs.limit",
                    "budgets.scopes[0].scope: unknown team 'nobody'", "budgets.scopes[1].soft_pct: must be <= 100",
                    "budgets.scopes[2].scope: must look like", "budgets.scopes[3].scope: is required",
                    "budgets.scopes[3].colour"):
        assert problem in err, problem
    assert "7 problem(s)" in err


def test_a_file_that_is_not_yaml_says_where(setup, tmp_path, capsys):
    config, _, _ = setup
    bad = tmp_path / "bad.yaml"
    bad.write_text("scopes: [\n  {scope: team:platform\n")
    assert main(["whatif", "--config", str(config), "--budgets", str(bad), "--from", "2026-11-01",
                 "--to", "2026-11-14"]) == 2
    assert "not valid YAML" in capsys.readouterr().err


@pytest.mark.parametrize(("start", "end", "message"), [
    ("2026-12-01", "2026-12-05", "no archive for 2026-12-01..2026-12-05"),
    ("2026-11-10", "2026-11-01", "--to 2026-11-01 is before --from 2026-11-10"),
    ("2026-11-31", "2026-12-01", "--from must be a date like 2026-11-01"),
])
def test_bad_ranges_are_clear_errors_and_exit_1(setup, capsys, start, end, message):
    config, _, current = setup
    assert main(["whatif", "--config", str(config), "--budgets", str(current), "--from", start, "--to", end]) == 1
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""
