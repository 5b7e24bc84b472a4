"""``make bench-overload`` still runs end to end (its Go client built, a real stack, tiny rates; no timing
asserts): the ladder, the knee, the runs at half and twice the knee; and a gateway told to keep its CPU
at 5% of a core refuses with 503 + Retry-After, which the client counts as refusals, not errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench import overload

pytestmark = pytest.mark.e2e


def test_the_ladder_the_knee_and_both_runs(tmp_path: Path) -> None:
    out = tmp_path / "overload.json"
    assert overload.main(["--rates", "20,40", "--seconds-per-rate", "1", "--seconds", "1", "--json", str(out)]) == 0
    (run,) = json.loads(out.read_text())["runs"]
    assert [r["rate"] for r in run["ladder"]] == [20, 40]
    for row in run["ladder"]:
        for side in ("direct", "gateway"):
            assert row[side]["errors"] == 0 and row[side]["timeouts"] == 0 and row[side]["ok"] > 0, row
    knee = run["knee_rps"]  # 40 on a quiet box; a loaded CI box may end the ladder at its first rung
    assert knee in (20, 40) and run["figures"]["timeouts"] == 0
    assert run["below"]["rate"] == knee // 2 and run["past"]["rate"] == 2 * knee
    assert run["past"]["gateway"]["ok"] + run["past"]["gateway"]["refused"] == run["past"]["gateway"]["offered"]


def test_refusals_are_counted_with_their_retry_after(tmp_path: Path) -> None:
    out = tmp_path / "overload.json"
    assert overload.main(["--rates", "200", "--seconds-per-rate", "3", "--ladder-only", "--target", "0.05",
                          "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())["runs"][0]["ladder"]
    gateway = row["gateway"]
    assert gateway["refused"] > 0 and gateway["refused_without_retry_after"] == 0 and gateway["errors"] == 0, gateway
    assert gateway["ok"] + gateway["refused"] == gateway["offered"]
