"""Provider secrets as the config file declares them (``farebox.secrets``)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import yaml

from farebox.secrets import load_secrets, resolve_provider_secrets
from farebox.settings import load_settings
from tests.harness import EXAMPLES


def _config(tmp_path: Path, **extra: object) -> Path:
    tree = yaml.safe_load((EXAMPLES / "farebox.yaml").read_text())
    secrets = tmp_path / "secrets.env"
    secrets.write_text((EXAMPLES / "secrets.env").read_text())
    os.chmod(secrets, 0o600)
    tree.update(secrets_file=str(secrets), state_dir=str(tmp_path), **extra)
    path = tmp_path / "farebox.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def test_declarations_default_to_what_the_files_deployments_use(tmp_path: Path) -> None:
    settings = load_settings(_config(tmp_path), env={})
    assert settings.secret_hosts.hosts["SIM_OPENAI_KEY"] == ("127.0.0.1:9090",)
    found, missing = resolve_provider_secrets(settings, ["SIM_OPENAI_KEY", "FAREBOX_CONTROL_DB"],
                                              env={"FAREBOX_CONTROL_DB": "postgresql://u:pw@db/x"})
    assert found == {"SIM_OPENAI_KEY": "sk-sim-openai-retail-0001"}  # the undeclared variable is never read
    assert missing == ["FAREBOX_CONTROL_DB"]


def test_explicit_declarations_must_cover_the_files_deployments(tmp_path: Path) -> None:
    cloud = {"SIM_AZURE_KEY": ["127.0.0.1"], "SIM_AWS_CREDENTIALS": ["127.0.0.1"], "SIM_GEMINI_KEY": ["127.0.0.1"]}
    path = _config(tmp_path, provider_secrets={"SIM_OPENAI_KEY": ["127.0.0.1:9090"],
                                               "SIM_ANTHROPIC_KEY": ["api.anthropic.com"], **cloud})
    with pytest.raises(Exception, match="SIM_ANTHROPIC_KEY is declared for"):
        load_settings(path, env={})
    ok = _config(tmp_path, provider_secrets={"SIM_OPENAI_KEY": ["127.0.0.1"], "SIM_ANTHROPIC_KEY": "127.0.0.1:9090",
                                             **cloud})
    assert load_settings(ok, env={}).secret_hosts.hosts["SIM_ANTHROPIC_KEY"] == ("127.0.0.1:9090",)


def test_a_secrets_file_others_can_read_is_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    settings = load_settings(_config(tmp_path), env={})
    with caplog.at_level(logging.WARNING, logger="farebox"):
        load_secrets(settings, env={})
    assert "readable by group or others" not in caplog.text
    assert settings.secrets_file is not None
    os.chmod(settings.secrets_file, 0o644)
    with caplog.at_level(logging.WARNING, logger="farebox"):
        secrets = load_secrets(settings, env={})
    assert "readable by group or others (mode 644)" in caplog.text and "sk-sim" not in caplog.text
    assert secrets.get("SIM_OPENAI_KEY")  # still used
