"""The ``logging``, ``tracing`` and ``alerts`` sections: defaults, every problem named by its setting, and
tracing off building nothing (``farebox.observe.build_tracing``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from farebox.observe import build_tracing
from farebox.settings import load_settings
from proxy.control.problems import ConfigError
from proxy.observe.metrics import Metrics
from tests import harness


def config(tmp_path: Path, **sections) -> Path:  # type: ignore[no-untyped-def]
    return harness.test_config(tmp_path, 1, 2, lambda tree: tree.update(sections))


def test_defaults_json_access_log_on_tracing_and_alerts_off(tmp_path: Path) -> None:
    obs = load_settings(config(tmp_path), env={}).observability
    assert (obs.logging.level, obs.logging.format, obs.logging.access_log) == ("info", "json", True)
    assert not obs.tracing.enabled and obs.tracing.otlp_endpoint is None and obs.alerts.webhook_url is None
    assert build_tracing(obs.tracing, Metrics()) is None


def test_every_bad_value_is_named_by_its_setting(tmp_path: Path) -> None:
    path = config(tmp_path, logging={"level": "loud", "format": "xml", "colour": True},
                  tracing={"enabled": "yes", "otlp_endpoint": "collector:4318"},
                  alerts={"webhook_url": "hooks.example/x", "retries": -1})
    with pytest.raises(ConfigError) as err:
        load_settings(path, env={})
    text = str(err.value)
    for where in ("logging.level", "logging.format", "logging.colour", "tracing.enabled", "tracing.otlp_endpoint",
                  "alerts.webhook_url", "alerts.retries"):
        assert where in text, where


def test_the_environment_names_the_collector(tmp_path: Path) -> None:
    path = config(tmp_path, tracing={"enabled": True})
    obs = load_settings(path, env={"FAREBOX_OTLP_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}).observability
    assert obs.tracing.otlp_endpoint == "http://127.0.0.1:4318/v1/traces"
    tracing = build_tracing(obs.tracing, Metrics())
    assert tracing is not None
    tracing.provider.shutdown()
