"""Showback and the usage API by the service tier the answer was served at."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from ledger.usage import TokenUsage
from reconcile.showback import showback, usage
from reconcile.warehouse import Warehouse
from tests.reconcile.test_fleet import IST_10, _served
from tests.reconcile.warehouse_fixtures import write_archive


def test_showback_and_usage_by_the_tier_served(tmp_path: Path) -> None:
    """A request answered at flex is grouped apart from the standard ones (service_tier, 'standard' when the
    provider named none); a failed attempt's tier does not count."""
    at = IST_10 + timedelta(minutes=30)
    flex, std = _served("f1", "payments", at, 100, dep="d-oai"), _served("s1", "payments", at, 50, dep="d-oai")
    flex[1] = replace(flex[1], usage=TokenUsage(input=100, service_tier="flex"))
    failed = _served("x1", "search", at, 10, dep="d-oai")
    failed[1] = replace(failed[1], outcome="unavailable", status=503, usage=TokenUsage(input=1, service_tier="flex"))
    root = write_archive(tmp_path / "archive", [*flex, *std, *failed])
    with Warehouse(root) as wh:
        rows = {(r["team"], r["service_tier"]): r["requests"] for r in showback(wh, "2026-12", ["team", "service_tier"]).dicts()}
    assert rows == {("payments", "flex"): 1, ("payments", "standard"): 1, ("search", "standard"): 1}
    day = (IST_10 + timedelta(hours=6)).date()
    by_tier = {r["service_tier"]: r["input_tokens"] for r in usage(root, day, day, ["service_tier"])}
    assert by_tier["flex"] == 100
