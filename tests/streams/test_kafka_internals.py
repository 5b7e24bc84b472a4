"""``streams.kafka.internals``: the worker refuses to run on a faust-streaming, mode-streaming or aiokafka
version its patches were not tested on, and says which versions are installed and which are tested."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest

from streams.kafka.internals import (
    TESTED_VERSIONS,
    UntestedVersions,
    check_versions,
    installed_version,
    untested_versions,
)
from tests import harness

TESTED = {name: versions[0] for name, versions in TESTED_VERSIONS.items()}


def test_the_installed_libraries_are_the_tested_ones():
    # the constraints file and the tested list agree: `make install` gives a worker that starts
    assert {name: installed_version(name) for name in TESTED_VERSIONS} == TESTED
    check_versions()


def test_an_untested_version_is_named_with_the_tested_ones():
    assert untested_versions(TESTED) == []
    assert untested_versions({**TESTED, "faust-streaming": "0.16.0", "aiokafka": None}) == [
        f"faust-streaming 0.16.0 is installed; tested: {TESTED['faust-streaming']}",
        f"aiokafka (not installed) is installed; tested: {TESTED['aiokafka']}",
    ]


def test_check_versions_refuses_an_untested_aiokafka():
    fake = {**TESTED, "aiokafka": "0.99.0"}
    with pytest.raises(UntestedVersions) as caught:
        check_versions(fake.get)
    message = str(caught.value)
    assert "refuses to run on untested versions" in message
    assert f"aiokafka 0.99.0 is installed; tested: {TESTED['aiokafka']}" in message
    assert "faust-streaming" not in message  # only what is wrong is named


def test_the_worker_refuses_an_untested_version_at_start(monkeypatch):
    from farebox.worker import run_worker

    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "0.16.0" if name == "faust-streaming" else real(name))
    with pytest.raises(SystemExit) as caught:
        run_worker(settings=None)  # type: ignore[arg-type]  # refused before the settings are read
    assert f"faust-streaming 0.16.0 is installed; tested: {TESTED['faust-streaming']}" in str(caught.value.code)


def test_farebox_worker_exits_non_zero_naming_the_versions(tmp_path):
    """The CLI as a supervisor runs it: a clear message on stderr and a non-zero exit, before any connection."""
    config = harness.test_config(tmp_path, 1, 2)
    program = ("import sys; from importlib import metadata; real = metadata.version; "
               "metadata.version = lambda name: '0.13.0' if name == 'aiokafka' else real(name); "
               "from farebox.cli import main; sys.exit(main(['worker', '--config', sys.argv[1]]))")
    done = subprocess.run([sys.executable, "-c", program, str(config)], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert f"aiokafka 0.13.0 is installed; tested: {TESTED['aiokafka']}" in done.stderr
    assert "Upgrading dependencies" in done.stderr
