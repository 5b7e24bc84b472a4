"""The finance and audit commands' config reader: the published head, else the last good, else the file's;
it never migrates, seeds or creates a config database (``farebox/config_reader.py``)."""

from __future__ import annotations

import shutil

from farebox.cli import main
from farebox.config_reader import read_snapshot
from farebox.control import open_config_db
from farebox.settings import load_settings
from proxy.control.document import save_last_good
from tests.reconcile.focus_archive import example_config


def test_with_no_database_it_reads_the_file_and_creates_nothing(tmp_path):
    settings = load_settings(example_config(tmp_path))
    snapshot = read_snapshot(settings)
    assert snapshot.price_book.latest == settings.snapshot.price_book.latest
    assert snapshot.budgets.scopes == settings.snapshot.budgets.scopes
    assert not (tmp_path / "state" / "control.sqlite").exists()
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").iterdir())


def test_it_reads_the_published_head(tmp_path):
    config = example_config(tmp_path)
    settings = load_settings(config)
    open_config_db(settings).close()  # what a gateway's first start does: migrate, seed version 1
    assert main(["budgets", "set", "team:platform", "--monthly-limit", "123", "--config", str(config)]) == 0
    snapshot = read_snapshot(settings)
    assert snapshot.version == 2
    assert snapshot.budgets.scopes["team:platform"].limit_micro == 123_000_000


def test_an_unreadable_database_falls_back_to_the_last_good_and_is_left_as_it_was(tmp_path):
    (tmp_path / "other").mkdir()
    other = load_settings(example_config(tmp_path / "other"))
    db = open_config_db(other)
    doc = db.document(1)
    db.close()
    config = example_config(tmp_path)
    settings = load_settings(config)
    (tmp_path / "state").mkdir()
    damaged = tmp_path / "state" / "control.sqlite"
    damaged.write_bytes(b"not a database" * 100)
    save_last_good(settings.state_dir, 7, doc)
    snapshot = read_snapshot(settings)
    assert snapshot.version == 7
    assert damaged.read_bytes() == b"not a database" * 100
    shutil.rmtree(tmp_path / "other")
