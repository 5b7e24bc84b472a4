"""``make bench-soak`` still runs end to end (a real stack, a few seconds, no timing asserts): every request of
the mix answered, RSS sampled, the verdict and the figures written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench import soak

pytestmark = pytest.mark.e2e


def test_a_few_seconds_of_the_mix(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    assert soak.main(["--rate", "40", "--minutes", "0.1", "--warm-minutes", "0.05", "--sample-s", "1",
                      "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["errors"] == {} and report["offered"] > 100
    assert len(report["samples"]) >= 3 and all(kb > 10_000 for _, kb in report["samples"])
    assert report["rss_warm_kb"] > 0 and isinstance(report["within_10pct"], bool)
