"""``farebox export focus``: the price book comes from the config (as serve loads it); clear errors, non-zero exits."""

from __future__ import annotations

import csv
import random
import subprocess
import sys
from datetime import datetime, timedelta
from decimal import Decimal

import pytest

from farebox.cli import main
from farebox.config_reader import read_snapshot
from farebox.settings import load_settings
from ledger.events import RequestAttempted
from reconcile.focus.corrections import Correction, write_corrections
from tests.reconcile.focus_archive import NOV, chat_deployments, example_config, request, write_archive


@pytest.fixture
def setup(tmp_path):
    """A config like the example's (state in tmp) and an archive of November traffic on its deployments."""
    config = example_config(tmp_path)
    snapshot = read_snapshot(load_settings(config))
    deployments = chat_deployments(snapshot)
    rng = random.Random(5)
    events = []
    for i in range(60):
        events += request(i, NOV + timedelta(hours=11 * i + 1), rng, book=snapshot.price_book, fx=snapshot.fx,
                          deployments=deployments)
    write_archive(tmp_path / "state" / "archive", events)
    return config, events, snapshot


def test_export_focus_writes_the_month_from_the_configs_price_book(setup, tmp_path, capsys):
    config, events, snapshot = setup
    out = tmp_path / "nov.csv"
    assert main(["export", "focus", "--config", str(config), "--month", "2026-11", "--out", str(out)]) == 0
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    ledger = sum(e.cost_micro for e in events if isinstance(e, RequestAttempted))
    assert sum(Decimal(r["BilledCost"]) for r in rows) * 1_000_000 == ledger > 0
    assert {r["BillingCurrency"] for r in rows} == {snapshot.currency}
    assert {r["ResourceId"] for r in rows} == {e.deployment for e in events if isinstance(e, RequestAttempted)} == {
        "sim-openai-mumbai", "sim-anthropic-mumbai", "sim-azure-mumbai", "sim-bedrock-mumbai", "sim-gemini-mumbai"}
    err = capsys.readouterr().err
    assert f"BilledCost {ledger} micro-{snapshot.currency} = ledger {ledger}" in err


def test_corrections_are_read_from_the_state_dir(setup, tmp_path, capsys):
    config, _, _ = setup
    fix = Correction(correction_id="rr/1", recorded_at=datetime(2026, 12, 3, tzinfo=NOV.tzinfo),
                     charge_day=NOV.date(), deployment="sim-openai-mumbai", provider="sim-openai",
                     account="acct-retail", model="sim-gpt-mid-2026-08", region="ap-south-1", token_type="input",
                     team="payments", original_price_version=1, original_tokens=1000, original_micro=176_000,
                     corrected_price_version=1, corrected_tokens=900, corrected_micro=158_400)
    write_corrections(tmp_path / "state" / "corrections" / "part-0.parquet", [fix])
    out = tmp_path / "dec.parquet"
    assert main(["export", "focus", "--config", str(config), "--month", "2026-12", "--out", str(out)]) == 0
    assert "2 rows (0 usage, 2 correction)" in capsys.readouterr().err


@pytest.mark.parametrize(("month", "message"), [
    ("2026-13", "month must look like YYYY-MM"),
    ("2026-1", "month must look like YYYY-MM"),
    ("2025-06", "no usage to export for 2025-06"),
])
def test_bad_month_is_a_clear_error_and_exit_1(setup, tmp_path, capsys, month, message):
    config, _, _ = setup
    out = tmp_path / "x.csv"
    assert main(["export", "focus", "--config", str(config), "--month", month, "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err
    assert not out.exists()


def test_missing_price_version_is_named(setup, tmp_path, capsys):
    config, _, snapshot = setup
    rng = random.Random(1)
    deployments = {"sim-openai-mumbai": ("sim-openai", "acct-retail", "sim-gpt-mid-2026-08", "ap-south-1"),
                   "sim-anthropic-mumbai": ("sim-anthropic", "acct-retail-anthropic", "sim-claude-mid-2026-08",
                                            "ap-south-1")}
    write_archive(tmp_path / "other", request(1, NOV + timedelta(days=3), rng, book=snapshot.price_book,
                                              fx=snapshot.fx, deployments=deployments, version=4))
    out = tmp_path / "x.csv"
    assert main(["export", "focus", "--config", str(config), "--month", "2026-11", "--out", str(out),
                 "--archive", str(tmp_path / "other")]) == 1
    assert "price version 4" in capsys.readouterr().err and not out.exists()


def test_console_script_runs_it(setup, tmp_path):
    config, _, _ = setup
    done = subprocess.run([sys.executable, "-m", "farebox", "export", "focus", "--config", str(config),
                           "--month", "11-2026", "--out", str(tmp_path / "x.csv")], capture_output=True, text=True)
    assert done.returncode == 1 and "month must look like YYYY-MM" in done.stderr
    done = subprocess.run([sys.executable, "-m", "farebox", "export", "focus", "--config", str(config),
                           "--month", "2026-11", "--out", str(tmp_path / "x.csv")], capture_output=True, text=True)
    assert done.returncode == 0 and "FOCUS 2026-11" in done.stderr, done.stderr
