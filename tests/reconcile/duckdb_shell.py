"""The plain ``duckdb`` shell, finance's way in with no farebox process (a uniquely named test helper module)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def duckdb_cli() -> str:
    """The ``duckdb`` shell: beside this Python (a virtualenv's bin), else on PATH."""
    beside = Path(sys.executable).with_name("duckdb")
    found = str(beside) if beside.exists() else shutil.which("duckdb")
    assert found is not None, "the duckdb shell is not installed (pip install duckdb-cli)"
    return found
