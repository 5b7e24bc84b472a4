"""Running the FinOps Foundation's focus-validator on a file (a uniquely named test helper module).

The validator lives in its own venv, because its pins cannot share the
project's: ``~/.cache/farebox/focus-validator-<hash of focus-validator.txt>``
(``$FAREBOX_FOCUS_VALIDATOR_VENV`` overrides), made here on first use from
``focus-validator.txt`` beside this file, outside the checkout like the Kafka
jars, so a fresh clone on the same machine reuses it and a changed
requirements file gets a venv of its own. A failed install fails the test,
it never skips it.
It runs as a subprocess with its JUnit-style report (``--output-type
unittest``), which is parsed into failed and errored checks with their
messages.

The validator reads its currency list from the relative path
``focus_validator/utils/currency_codes.csv``, so it runs with its
site-packages folder as the working directory.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent
REPO = HERE.parents[1]
REQUIREMENTS = HERE / "focus-validator.txt"
VENV = Path(os.environ.get("FAREBOX_FOCUS_VALIDATOR_VENV") or Path.home() / ".cache" / "farebox" / (
    "focus-validator-" + hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:12]))


@dataclass(frozen=True)
class Report:
    tests: int
    failed: list[str]  # "check name: message"
    errored: list[str]
    skipped: int
    output: str

    @property
    def passed(self) -> bool:
        return self.tests > 0 and not self.failed and not self.errored


def _python() -> Path:
    python = VENV / "bin" / "python"
    stamp = VENV / ".installed"
    want = REQUIREMENTS.read_text()
    VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(VENV.parent / ".focus-validator.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text() == want and python.exists():
            return python
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
        done = subprocess.run([str(python), "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)],
                              capture_output=True, text=True, timeout=900)
        if done.returncode:
            raise RuntimeError(f"installing focus-validator into {VENV} failed:\n{done.stdout}\n{done.stderr}")
        stamp.write_text(want)
    return python


def run_validator(path: Path, report: Path) -> Report:
    """Validate ``path`` against FOCUS 1.0 (the version focus-validator 1.0.0 knows)."""
    python = _python()
    site = subprocess.run([str(python), "-I", "-c", "import focus_validator, os; "
                           "print(os.path.dirname(os.path.dirname(focus_validator.__file__)))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    done = subprocess.run(
        [str(python), "-I", "-m", "focus_validator.main", "--data-file", str(path), "--validate-version", "1.0",
         "--output-type", "unittest", "--output-destination", str(report)],
        capture_output=True, text=True, cwd=site, timeout=600)
    output = done.stdout + done.stderr
    if done.returncode or not report.exists():
        raise AssertionError(f"focus-validator did not run (exit {done.returncode}):\n{output}")
    root = ET.parse(report).getroot()
    failed, errored = [], []
    for case in root.iter("testcase"):
        for kind, into in (("failure", failed), ("error", errored)):
            for node in case.findall(kind):
                into.append(f"{case.get('name')}: {node.get('message')}")
    return Report(int(root.get("tests", 0)), failed, errored, int(root.get("skipped", 0)), output)
