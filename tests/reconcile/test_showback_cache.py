"""A response-cache hit in the warehouse: served, costs nothing, and its saving is showback's cache_saved_micro."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from ledger.codec import decode, encode
from ledger.usage import TokenUsage
from reconcile.showback import showback
from reconcile.warehouse import Warehouse
from tests.reconcile.warehouse_fixtures import MIDNIGHT_IST, _admit, _settle, month_events, write_archive

PAY = ["key:payments-k", "team:payments", "bu:retail"]


def test_a_hit_costs_nothing_and_its_saving_is_summed_per_group(tmp_path: Path) -> None:
    at = MIDNIGHT_IST + timedelta(hours=2)
    hit = replace(_settle("c1", at + timedelta(milliseconds=3), 9_000, 0, "d-oai", 0, TokenUsage(), PAY),
                  cache_hit=True, cache_saved_micro=7_000)
    assert decode(encode(hit)) == hit
    events = [*month_events(), _admit("c1", at, 9_000), hit]
    with Warehouse(write_archive(tmp_path / "archive", events)) as wh:
        [req] = wh.query("SELECT served, fallback, cost_micro, cache_hit, cache_saved_micro, attempts FROM requests "
                         "WHERE request_id = 'c1'").dicts()
        assert req == {"served": True, "fallback": False, "cost_micro": 0, "cache_hit": True,
                       "cache_saved_micro": 7_000, "attempts": 0}
        rows = {r["team"]: r for r in showback(wh, "2026-12", ["team"], {}).dicts()}
        assert rows["payments"]["cache_saved_micro"] == 7_000 and rows["payments"]["spend_micro"] == 32_000
        assert (rows["payments"]["served"], rows["payments"]["fallbacks"]) == (3, 1)  # the hit served, no fallback
        assert rows["search"]["cache_saved_micro"] == 0


def test_a_settlement_of_schema_1_reads_as_no_saving() -> None:
    old = encode(_settle("r9", MIDNIGHT_IST, 10, 5, "d-oai", 1, TokenUsage(input=1), PAY)).decode()
    old = old.replace('"schema":3', '"schema":1').replace(',"cache_saved_micro":0', "")
    old = old.replace(',"cache_kind":null', "").replace(',"cache_similarity":null', "")
    assert '"cache_saved_micro"' not in old
    assert decode(old).cache_saved_micro == 0
