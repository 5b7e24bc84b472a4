"""``farebox rerate``: a dry run by default, clear errors and non-zero exits, nothing appended on bad input."""

from __future__ import annotations

import json
import random
from datetime import timedelta

import pytest

from farebox.cli import main
from farebox.config_reader import read_snapshot
from farebox.settings import load_settings
from tests.harness import read_events
from tests.reconcile.focus_archive import NOV, chat_deployments, example_config, request, write_archive
from tests.reconcile.rerate_fixtures import price_spec


@pytest.fixture
def config(tmp_path):
    """The example's config (state in tmp) and an archive of November traffic priced at a version 5 the
    book does not have (so re-rating under the book's version 1 corrects every priced request)."""
    path = example_config(tmp_path, event_log=True)
    snapshot = read_snapshot(load_settings(path))
    deployments = chat_deployments(snapshot)
    rng = random.Random(5)
    events = []
    for i in range(30):
        events += request(i, NOV + timedelta(hours=11 * i + 1), rng, book=snapshot.price_book, fx=snapshot.fx,
                          deployments=deployments)
    write_archive(tmp_path / "state" / "archive", events)
    return path


def test_dry_run_prints_the_difference_and_appends_nothing(config, capsys):
    assert main(["rerate", "--config", str(config), "--from", "2026-11-01", "--to", "2026-11-30",
                 "--price-version", "1", "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == "day,team,deployment,currency,requests,attempts,old_micro,new_micro,diff_micro"
    assert "0 correction(s)" in err and "dry run" in err  # the archive was priced at version 1: no difference
    assert not (config.parent / "state" / "events.sqlite").exists()


@pytest.mark.parametrize("args, message", [
    (["--from", "2026-11-01", "--to", "2026-11-30", "--price-version", "9"], "unknown price version 9"),
    (["--from", "2025-01-01", "--to", "2025-01-31", "--price-version", "1"], "no events dated 2025-01-01"),
    (["--from", "2026-11-31", "--to", "2026-11-30", "--price-version", "1"], "--from must be a date"),
    (["--from", "2026-11-30", "--to", "2026-11-01", "--price-version", "1"], "after --to"),
])
def test_bad_input_is_a_clear_error_and_appends_nothing(config, capsys, args, message):
    assert main(["rerate", "--config", str(config), *args, "--apply"]) == 1
    assert message in capsys.readouterr().err
    assert not (config.parent / "state" / "events.sqlite").exists()


def test_apply_appends_to_the_sqlite_log_once(config, capsys):
    v1 = read_snapshot(load_settings(config)).price_book.get(1)
    assert main(["prices", "add", "--config", str(config), "--spec", price_spec(v1.prices, 3), "--allow-large-change"]) == 0
    capsys.readouterr()
    args = ["rerate", "--config", str(config), "--from", "2026-11-01", "--to", "2026-11-30", "--price-version", "2",
            "--apply", "--format", "json"]
    assert main(args) == 0
    rows = json.loads(capsys.readouterr().out)
    log = config.parent / "state" / "events.sqlite"
    first = read_events(log)
    assert first and {e.type for e in first} == {"rating.corrected"}
    assert sum(r["diff_micro"] for r in rows) == sum(e.cost_micro - e.old_cost_micro for e in first) > 0
    assert main(args) == 0  # the corrections are not archived yet: read from the log's tail, same ids
    assert "nothing to append" in capsys.readouterr().err
    assert read_events(log) == first
