"""The budget bench still runs end to end against a real stack (tiny counts, no timing asserts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench import budget as bench

pytestmark = pytest.mark.e2e


def test_budget_bench_small_run(tmp_path: Path) -> None:
    out = tmp_path / "budget.json"
    code = bench.main(["--requests", "60", "--keys", "5", "--json", str(out)])
    rep = json.loads(out.read_text())
    assert code == 0, rep["problems"]
    assert rep["requests"] == 60 and rep["errors"] == 0
    # the budget pays for ~60% of the work at actual cost: some are admitted, the rest refused by a budget code
    assert rep["admitted"] > 0 and rep["refused"] > 0
    assert rep["admitted"] + rep["refused"] == 60
    assert set(rep["refused_by_code"]) <= {"budget_exhausted", "budget_reserved"}
    assert rep["refused_with_wrong_retry_headers"] == 0
    assert rep["overshoot_beyond_overrun_micro"] == 0 and rep["overshoot_pct_of_limit"] <= 1
    assert rep["eventlog"]["admitted"] == rep["admitted"] == rep["eventlog"]["settled"]
    assert rep["admin"]["settled_equals_eventlog"] and rep["admin"]["held_is_zero"]
    first = rep["unused_at_first_refusal"]  # the first budget_exhausted, if the money ran out before the waits
    assert first is None or (first["message_left_micro"] is not None and first["eventlog_prefix_with_message_figure"])
    assert set(rep["goals"]) and all(isinstance(v, bool) for v in rep["goals"].values())
    assert rep["usage_mismatches"] == 0
    assert rep["admission_ms"]["all"]["n"] == 60 and rep["admission_ms"]["all"]["p99"] >= 0
