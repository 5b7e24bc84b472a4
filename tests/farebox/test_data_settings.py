"""The ``cache:`` and ``body_log:`` settings sections: defaults, bounds, and the body log's master key by name."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import yaml

from farebox.cli import main
from farebox.pod import body_log_of
from farebox.settings import load_settings
from proxy.control.problems import ConfigError
from tests.harness import test_config as write_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "farebox.yaml"
KEY = base64.urlsafe_b64encode(b"k" * 32).decode()


def write(tmp_path: Path, mutate=lambda t: None) -> Path:
    tree = yaml.safe_load(EXAMPLE.read_text())
    tree["secrets_file"] = str(ROOT / "examples" / "secrets.env")
    tree["state_dir"] = str(tmp_path)
    mutate(tree)
    path = tmp_path / "farebox.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def test_defaults_no_body_log_without_its_key(tmp_path: Path) -> None:
    s = load_settings(write(tmp_path), env={})
    assert (s.cache.ttl_s, s.cache.max_temperature, s.cache.max_entries) == (3600, 1.0, 10_000)
    assert s.body_log.retention_days == 30 and s.body_log.master_key is None
    assert body_log_of(s) is None


def test_sections_are_read_and_bad_values_reported_together(tmp_path: Path) -> None:
    def mutate(t):
        t["cache"] = {"ttl_s": 60, "max_temperature": 0.3, "colour": "blue"}
        t["body_log"] = {"retention_days": 0}

    with pytest.raises(ConfigError) as err:
        load_settings(write(tmp_path, mutate), env={})
    assert "cache.colour: unknown field" in str(err.value) and "body_log.retention_days" in str(err.value)
    ok = load_settings(write(tmp_path, lambda t: t.update(cache={"ttl_s": 60, "max_temperature": 0.3})), env={})
    assert (ok.cache.ttl_s, ok.cache.max_temperature) == (60, 0.3)


def test_the_master_key_comes_from_the_named_variable_and_never_shows(tmp_path: Path) -> None:
    s = load_settings(write(tmp_path, lambda t: t.update(body_log={"key_env": "MY_BODY_KEY"})),
                      env={"MY_BODY_KEY": KEY})
    assert s.body_log.master_key == b"k" * 32
    assert KEY not in repr(s.body_log) and "k" * 32 not in repr(s)
    log = body_log_of(s)
    assert log is not None and log.retention_s == 30 * 86_400
    log.store.close()
    with pytest.raises(ConfigError) as err:
        load_settings(write(tmp_path), env={"FAREBOX_BODY_LOG_KEY": "too-short"})
    assert "FAREBOX_BODY_LOG_KEY must be urlsafe base64" in str(err.value) and "too-short" not in str(err.value)


def test_a_team_opting_in_without_a_key_is_a_problem(tmp_path: Path) -> None:
    def mutate(t):
        t["teams"][0]["body_log"] = True

    with pytest.raises(ConfigError) as err:
        load_settings(write(tmp_path, mutate), env={})
    assert "opt into body logging but FAREBOX_BODY_LOG_KEY is not set" in str(err.value)
    assert load_settings(write(tmp_path, mutate), env={"FAREBOX_BODY_LOG_KEY": KEY}).snapshot.teams[
        yaml.safe_load(EXAMPLE.read_text())["teams"][0]["name"]].body_log


def test_the_cli_turns_a_teams_body_log_on_and_off(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config(tmp_path, sim_port=9, gw_port=9)  # nothing is served: the CLI writes the config database
    for flag, want in (("on", True), ("off", False)):
        capsys.readouterr()
        assert main(["teams", "set", "platform", "--body-log", flag, "--config", str(path)]) == 0
        assert json.loads(capsys.readouterr().out)["body_log"] is want
