"""Per-minute rollups: one row per close, counted once however often its record is delivered or re-sent."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import orjson
import pytest

from ledger.events import RequestAdmitted, RequestSettled
from ledger.rollups import COUNTERS, RollupTotal, apply_rows, merge, rows_record
from ledger.splitting import SplitBatch, split
from ledger.usage import TokenUsage

UTC = ZoneInfo("UTC")
T0 = datetime(2026, 11, 29, 10, 15, 5, tzinfo=timezone.utc)


def row(requests: int = 1, cost: int = 100, errors: int = 0) -> dict[str, int]:
    return {**dict.fromkeys(COUNTERS, 0), "requests": requests, "cost_micro": cost, "errors": errors}


def wire(record: dict) -> object:
    return orjson.loads(orjson.dumps(record))  # as the rollups agent reads it


def test_a_record_delivered_twice_counts_once() -> None:
    total = RollupTotal.from_value(None)
    record = wire(rows_record("1", [(10, row(cost=100)), (12, row(cost=250))]))
    assert apply_rows(total, record) == 2
    assert apply_rows(total, record) == 0
    assert (total.counts["requests"], total.counts["cost_micro"], total.high_water) == (2, 350, {"1": 12})


def test_rows_sent_again_with_new_ones_add_only_the_new() -> None:
    """A splitter that crashed before recording its request states re-sends the closes after the committed
    offset, batched differently: dupes and new rows in one record."""
    total = RollupTotal.from_value(None)
    apply_rows(total, wire(rows_record("1", [(10, row(cost=100)), (12, row(cost=250))])))
    assert apply_rows(total, wire(rows_record("1", [(12, row(cost=250)), (15, row(cost=40, errors=1))]))) == 1
    assert (total.counts["requests"], total.counts["cost_micro"], total.counts["errors"]) == (3, 390, 1)
    value = orjson.loads(orjson.dumps(total.to_value()))  # the table's value round-trips
    assert RollupTotal.from_value(value) == total


def test_totals_and_records_from_before_offsets_are_still_read() -> None:
    old_value = merge(None, row(requests=4, cost=900))  # a table value written before high-water marks
    total = RollupTotal.from_value(old_value)
    assert total.counts["requests"] == 4 and total.high_water == {}
    assert apply_rows(total, [None, row(cost=10)]) == 1  # an old record: added as it is
    assert total.counts["cost_micro"] == 910
    with pytest.raises(ValueError):
        apply_rows(total, wire({"source": "0", "rows": [[3, [1, 2]]]}))


def test_the_splitter_batches_each_close_with_its_offset() -> None:
    admitted = RequestAdmitted(
        time=T0, request_id="r1", team="a", key_id="k1", business_unit="", app="app", run_id=None, alias="chat",
        data_class="internal", est_input_tokens=10, max_output_tokens=10, holds={"team:a": 500}, currency="INR",
        price_version=1, pod="p1", hold_ttl_s=60, stream=False)
    settled = RequestSettled(
        time=T0 + timedelta(seconds=1), request_id="r1", team="a", final_status=200, attempts=1, cache_hit=False,
        usage=TokenUsage(input=10, output=5), cost_micro=321, cost_by_scope={"team:a": 321},
        hold_released={"team:a": 179}, overrun_micro=0, latency_ms=900, currency="INR", deployment="dep-1")
    batch = SplitBatch()
    opened = split(admitted, None, UTC, "2", 40)
    batch.add("r1", opened, 2, 40)
    closed = split(settled, opened.state, UTC, "2", 41)
    batch.add("r1", closed, 2, 41)
    [(key, (source, rows))] = batch.rows.items()
    assert key == "a|k1|chat|dep-1|2026-11-29T10:15" and source == "2" and [offset for offset, _ in rows] == [41]
    total = RollupTotal.from_value(None)
    assert apply_rows(total, wire(rows_record(source, rows))) == 1
    assert (total.counts["cost_micro"], total.counts["input"], total.counts["output"]) == (321, 10, 5)


def test_a_malformed_record_is_refused_whole_before_anything_is_added() -> None:
    total = RollupTotal.from_value(None)
    good = [5, [1] + [0] * (len(COUNTERS) - 1)]
    for bad in ({"source": "0", "rows": [good, [6, [1] * (len(COUNTERS) - 1)]]},  # the second row is short
                {"source": "0", "rows": [good, [7, [1.5] + [0] * (len(COUNTERS) - 1)]]},  # money is never a float
                {"source": "0", "rows": [good, ["8", good[1]]]},  # an offset that is not an integer
                {"source": 0, "rows": []}, {"rows": []}, "rows", [None, {"cost_micro": 1.0}], [None]):
        with pytest.raises(ValueError):
            apply_rows(total, wire(bad))
        assert total == RollupTotal.from_value(None)  # nothing of the good first row was added
