"""Settings: parsed once, every problem at once, secrets by name only."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from farebox.secrets import load_secrets
from farebox.settings import load_settings
from proxy.control.problems import ConfigError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "farebox.yaml"


def write(tmp_path: Path, mutate=lambda t: None) -> Path:
    tree = yaml.safe_load(EXAMPLE.read_text())
    tree["secrets_file"] = str(ROOT / "examples" / "secrets.env")
    tree["state_dir"] = str(tmp_path)
    mutate(tree)
    path = tmp_path / "farebox.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def test_example_loads_with_paths_relative_to_the_file(tmp_path: Path) -> None:
    settings = load_settings(EXAMPLE)
    assert settings.port == 8080 and settings.max_body_bytes == 4 * 1024 * 1024
    assert settings.event_log_path == EXAMPLE.parent / "../var/events.sqlite"


def test_settings_and_control_problems_together(tmp_path: Path) -> None:
    def mutate(t):
        t["server"]["port"] = "eighty"
        t["server"]["colour"] = "blue"
        t["deployments"][0]["dialect"] = "x"
        t["surprise"] = 1

    with pytest.raises(ConfigError) as err:
        load_settings(write(tmp_path, mutate))
    text = str(err.value)
    for fragment in ("server.port: must be an integer", "server.colour: unknown field",
                     "deployments[0].dialect", "surprise: unknown field"):
        assert fragment in text


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("server:\n  port: [1,\n")
    with pytest.raises(ConfigError) as err:
        load_settings(path)
    assert "line" in str(err.value) and "not valid YAML" in str(err.value)


def test_secrets_env_wins_and_missing_is_named_not_shown(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path))
    secrets = load_secrets(settings, env={"SIM_OPENAI_KEY": "sk-from-env-123"})
    assert secrets.get("SIM_OPENAI_KEY") == "sk-from-env-123"
    assert secrets.get("SIM_ANTHROPIC_KEY") == "sk-sim-anthropic-retail-0001"
    assert "sk-" not in repr(secrets)
    settings = load_settings(write(tmp_path, lambda t: t.pop("secrets_file")))
    with pytest.raises(ConfigError) as err:
        load_secrets(settings, env={})
    assert "SIM_OPENAI_KEY is not set" in str(err.value)


def test_config_check_cli(tmp_path: Path) -> None:
    ok = subprocess.run([sys.executable, "-m", "farebox", "config", "check", str(write(tmp_path))],
                        capture_output=True, text=True, cwd=ROOT)
    assert ok.returncode == 0 and ": ok" in ok.stdout
    bad = write(tmp_path, lambda t: t["aliases"][0].update(deployments=["ghost"]))
    res = subprocess.run([sys.executable, "-m", "farebox", "config", "check", str(bad)],
                         capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 2 and "aliases[0].deployments[0]: unknown deployment 'ghost'" in res.stderr


def test_budget_wait_settings_default_and_bound(tmp_path: Path) -> None:
    settings = load_settings(EXAMPLE)
    assert (settings.budget_wait_s, settings.budget_wait_max_s) == (20.0, 30.0)

    def mutate(t):
        t["server"]["budget_wait_s"] = 40
        t["server"]["budget_wait_max_s"] = 30

    with pytest.raises(ConfigError) as err:
        load_settings(write(tmp_path, mutate))
    assert "server.budget_wait_s: is 40, above server.budget_wait_max_s (30)" in str(err.value)


def test_a_lease_ttl_within_the_wallets_funding_margin_is_refused(tmp_path: Path) -> None:
    def mutate(t):
        t.setdefault("distributed", {})["lease_ttl_s"] = 4

    with pytest.raises(ConfigError) as err:
        load_settings(write(tmp_path, mutate))
    assert "distributed.lease_ttl_s" in str(err.value) and "more than 5 s" in str(err.value)


def test_serve_refuses_a_worker_count_below_one_and_workers_in_distributed_mode(tmp_path: Path, capsys) -> None:
    from farebox.cli import main

    assert main(["serve", "--config", str(write(tmp_path)), "--workers", "0"]) == 2
    assert "--workers must be at least 1, got 0" in capsys.readouterr().err

    def distributed(t):
        t["mode"] = "distributed"

    assert main(["serve", "--config", str(write(tmp_path, distributed)), "--workers", "2"]) == 2
    assert "--workers is for embedded mode" in capsys.readouterr().err
