"""What a pod loads when it starts: the embedded gateway never imports the finance side's engines, alembic or
the Kafka client (each is a fraction of a second of CPU at every pod and CLI start; they load on first use)."""

from __future__ import annotations

import subprocess
import sys

from tests.harness import ROOT

HEAVY = ("pyarrow", "duckdb", "alembic", "aiokafka", "faust")


def test_the_gateway_and_the_cli_parser_load_no_heavy_dependency() -> None:
    probe = ("import sys, farebox.wiring, farebox.cli; farebox.cli.parser(); "
             f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"loaded at start: {done.stdout.strip()}"
