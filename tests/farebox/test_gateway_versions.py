"""A distributed gateway pod refuses to start on an aiokafka version whose internals were not tested, naming it,
before it connects to anything (its Kafka event log reaches inside aiokafka, as the worker does)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from farebox.distributed import check_gateway_versions
from streams.kafka.internals import GATEWAY_LIBRARIES, TESTED_VERSIONS
from tests import harness

TESTED = {name: versions[0] for name, versions in TESTED_VERSIONS.items()}


def test_the_tested_aiokafka_passes_and_only_what_the_gateway_uses_is_checked():
    assert GATEWAY_LIBRARIES == ("aiokafka",)
    check_gateway_versions()
    check_gateway_versions({**TESTED, "faust-streaming": "0.16.0"}.get)  # the gateway runs no Faust


def test_an_untested_aiokafka_is_refused_naming_both_versions():
    with pytest.raises(SystemExit) as caught:
        check_gateway_versions({**TESTED, "aiokafka": "0.99.0"}.get)
    message = str(caught.value.code)
    assert message.startswith("error: a distributed gateway pod relies on internals")
    assert f"aiokafka 0.99.0 is installed; tested: {TESTED['aiokafka']}" in message


def test_farebox_serve_in_distributed_mode_exits_non_zero_before_connecting(tmp_path):
    def distributed(tree: dict) -> None:  # nothing listens at these addresses: the check comes first
        tree["mode"] = "distributed"
        tree["distributed"] = {"bootstrap": "127.0.0.1:1", "redis_url": "redis://127.0.0.1:1/0",
                               "spool_dir": str(tmp_path / "spool")}

    config = harness.test_config(tmp_path, 1, 2, distributed)
    program = ("import sys; from importlib import metadata; real = metadata.version; "
               "metadata.version = lambda name: '0.13.0' if name == 'aiokafka' else real(name); "
               "from farebox.cli import main; sys.exit(main(['serve', '--config', sys.argv[1]]))")
    done = subprocess.run([sys.executable, "-c", program, str(config)], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0, done.stderr
    assert f"aiokafka 0.13.0 is installed; tested: {TESTED['aiokafka']}" in done.stderr
    assert "Upgrading dependencies" in done.stderr
    assert "Traceback" not in done.stderr, done.stderr
