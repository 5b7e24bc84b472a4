"""``make bench-batch`` still runs end to end (its Go client, a real stack, a tiny batch at tiny rates; no timing
asserts): the direct, alone and beside runs, and the batch followed to its end on the tight limit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench import batch

pytestmark = pytest.mark.e2e


def test_the_three_runs_and_the_batch_to_its_end(tmp_path: Path) -> None:
    out = tmp_path / "batch.json"
    assert batch.main(["--rate", "10", "--seconds", "2", "--lines", "30", "--limit-rpm", "1200", "--wait", "60",
                       "--json", str(out)]) == 0
    (run,) = json.loads(out.read_text())["runs"]
    for side in ("direct", "alone", "beside"):
        assert run[side]["ok"] == run[side]["offered"] > 0 and run[side]["timeouts"] == 0, run[side]
    figures = run["figures"]
    assert figures["batch_status"] == "completed" and figures["batch_completed"] == 30
    assert figures["interactive_not_ok_beside"] == 0 and figures["beside_p99_over_alone"] is not None
