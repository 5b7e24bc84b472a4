"""``farebox serve`` warns once, with the ``config apply`` diff, when the YAML was edited after the first start."""

from __future__ import annotations

import io
from pathlib import Path

import yaml

from farebox.control import open_config_db
from farebox.drift_warning import pending_changes, warn_if_drifted
from farebox.settings import load_settings
from infra.process import free_port
from tests.harness import spawn, stop, wait_http
from tests.harness import test_config as make_config

HEADLINE = "differs from the config database"


def _raise_rpm(config: Path, rpm: int) -> None:
    tree = yaml.safe_load(config.read_text())
    tree["rate_limits"]["key_defaults"]["rpm"] = rpm
    config.write_text(yaml.safe_dump(tree, sort_keys=False))


def _serve_once(config: Path, port: int, log: Path) -> str:
    """Start ``farebox serve``, wait until it answers, stop it; what it printed."""
    log.write_text("")
    proc = spawn(["farebox", "serve", "--config", str(config)], log)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc, log, timeout=30)
    finally:
        stop(proc)
    return log.read_text()


def test_serve_prints_the_pending_diff_once_after_a_yaml_edit(tmp_path: Path) -> None:
    port = free_port()
    config = make_config(tmp_path, free_port(), port)
    first = _serve_once(config, port, tmp_path / "first.log")  # seeds the database from the file
    assert HEADLINE not in first
    assert HEADLINE not in _serve_once(config, port, tmp_path / "unchanged.log")

    _raise_rpm(config, 777)
    edited = _serve_once(config, port, tmp_path / "edited.log")
    assert edited.count(HEADLINE) == 1, edited
    assert "~ policy" in edited and "777" in edited
    assert f"farebox config apply {config}" in edited


def test_the_check_is_a_dry_run_and_matches_config_apply(tmp_path: Path) -> None:
    config = make_config(tmp_path, free_port(), free_port())
    settings = load_settings(config)
    assert pending_changes(settings) is None  # nothing to compare before the first start seeds the database
    open_config_db(settings).close()
    assert pending_changes(settings) == []

    _raise_rpm(config, 901)
    edited = load_settings(config)
    out = io.StringIO()
    diff = warn_if_drifted(edited, out)
    assert len(diff) == 1 and diff[0].startswith("~ policy") and "901" in diff[0]
    assert diff[0] in out.getvalue() and "NOT live" in out.getvalue()
    assert warn_if_drifted(edited, io.StringIO()) == diff  # nothing was written: still pending

    from farebox.cli import main

    assert main(["config", "apply", str(config)]) == 0
    assert pending_changes(edited) == []
