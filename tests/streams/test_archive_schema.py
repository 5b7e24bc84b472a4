"""The archive's typed columns agree with the event they were derived from; unreadable files are named."""

from __future__ import annotations

from datetime import date, datetime, timezone

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from checkpoint_events import request_events
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.codec import encode, to_dict
from ledger.events import Event, RequestAdmitted
from ledger.usage import TOKEN_TYPES
from streams.archive.read import ArchiveError, archive_warnings, read_archive
from streams.archive.schema import SCHEMA, SCHEMA_METADATA_KEY, typed_row, typed_table
from streams.archive.write import ArchiveWriter, Record
from tests.ledger.event_strategies import any_event
from tests.streams.relist import relist

NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)


def _check_row(event: Event, row: dict) -> None:
    wire = to_dict(event)
    assert row["id"] == event.id and row["type"] == event.type and row["event_time"] == event.time
    assert orjson.loads(row["event"]) == orjson.loads(encode(event))
    for name in ("team", "key_id", "business_unit", "app", "run_id", "alias", "deployment", "provider", "account",
                 "model", "region", "data_class", "outcome", "error_code", "ttft_ms", "latency_ms", "attempt",
                 "attempts", "cache_hit", "stream", "cost_micro", "overrun_micro", "amount_micro", "currency",
                 "price_version", "pod", "scope", "lease_id", "period", "est_input_tokens", "max_output_tokens",
                 "cost_centre"):
        assert row[name] == wire.get(name), name
    assert row["tags"] == (sorted(wire["tags"].items()) if "tags" in wire else None)
    assert row["status"] == wire.get("status", wire.get("final_status"))
    usage = wire.get("usage")
    for kind in TOKEN_TYPES:
        assert row[f"{kind}_tokens"] == (usage[kind] if usage else None)
    costs = wire.get("cost_by_scope", wire.get("charged"))
    as_map = {e["scope"]: e["micro"] for e in row["scope_costs"]} if row["scope_costs"] is not None else None
    assert as_map == costs
    holds = {e["scope"]: e["micro"] for e in row["holds"]} if row["holds"] is not None else None
    assert holds == wire.get("holds")


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(any_event)
def test_typed_columns_match_the_event(event: Event) -> None:
    row = typed_row(to_dict(event), stored_at=NOW, partition=0, offset=1, text=encode(event).decode())
    _check_row(event, row)
    pa.Table.from_pylist([row], schema=SCHEMA)  # every value fits its column type


def test_an_admissions_cost_centre_and_tags_fill_their_columns(tmp_path) -> None:
    def admitted(**extra) -> RequestAdmitted:
        return RequestAdmitted(time=NOW, request_id="r-1", team="platform", key_id="fb-dev-1a2b", business_unit="retail",
                               app="atlas", run_id=None, alias="chat-default", data_class="internal",
                               est_input_tokens=10, max_output_tokens=64, holds={"team:platform": 5}, currency="INR",
                               price_version=1, pod="pod-a", hold_ttl_s=600, stream=False, **extra)

    event = admitted(cost_centre="CC-1077", tags={"project": "atlas", "env": "prod"})
    writer = ArchiveWriter(tmp_path, "log")
    writer.write([Record(0, 1, encode(event))], now=NOW)
    (row,) = read_archive(tmp_path, date(2026, 1, 1), date(2026, 12, 31)).to_pylist()
    assert row["cost_centre"] == "CC-1077"
    assert dict(row["tags"]) == {"project": "atlas", "env": "prod"}
    untagged = typed_row(to_dict(admitted()), stored_at=NOW, partition=0, offset=2, text=encode(admitted()).decode())
    assert untagged["cost_centre"] is None and untagged["tags"] == []


def test_rows_round_trip_through_parquet(tmp_path) -> None:
    events = [e for i in range(20) for e in request_events(i)]
    writer = ArchiveWriter(tmp_path, "log")
    writer.write([Record(0, n + 1, encode(e)) for n, e in enumerate(events)], now=NOW)
    table = read_archive(tmp_path, date(2026, 11, 1), date(2026, 12, 31))
    assert table.num_rows == len(events)
    for event, row in zip(events, table.to_pylist()):
        _check_row(event, row)
    settled = table.filter(pa.compute.equal(table.column("type"), "request.settled"))
    assert sum(settled.column("cost_micro").to_pylist()) == sum(
        e.cost_micro for e in events if e.type == "request.settled")


def test_a_newer_or_corrupt_listed_file_is_refused_by_name(tmp_path) -> None:
    """A file the manifest vouches for (here listed again as a newer writer would) of a newer schema, or one
    that is not Parquet, is refused by name."""
    events = request_events(1)
    [path] = [p for p in ArchiveWriter(tmp_path, "log").write([Record(0, 1, encode(events[0]))], now=NOW)]
    newer = pq.read_table(path)
    newer = newer.replace_schema_metadata({SCHEMA_METADATA_KEY: b"99"})
    pq.write_table(newer, path)
    relist(tmp_path, path)
    with pytest.raises(ArchiveError, match=r"archive schema 99 is newer") as info:
        read_archive(tmp_path, date(2026, 11, 1), date(2026, 12, 31))
    assert str(path) in str(info.value)
    path.write_bytes(path.read_bytes()[:40])  # truncated
    relist(tmp_path, path)
    with pytest.raises(ArchiveError, match="not a readable archive file") as info:
        read_archive(tmp_path, date(2026, 11, 1), date(2026, 12, 31))
    assert str(path) in str(info.value)


def test_a_rewritten_or_unlisted_file_is_left_out_and_named(tmp_path) -> None:
    """What the manifest does not vouch for is never read: a row rewritten in place, a foreign file dropped in."""
    events = request_events(2)
    writer = ArchiveWriter(tmp_path, "log")
    [kept] = writer.write([Record(0, 1, encode(events[0]))], now=NOW)
    [forged] = writer.write([Record(0, 2, encode(events[1]))], now=NOW.replace(hour=11))
    table = pq.read_table(forged)
    pq.write_table(table.set_column(table.schema.get_field_index("team"), "team",
                                    pa.array(["someone-else"] * table.num_rows)), forged)
    foreign = kept.parent / "part-foreign.parquet"
    pq.write_table(pq.read_table(kept), foreign)
    rows = read_archive(tmp_path, date(2026, 11, 1), date(2026, 12, 31)).to_pylist()
    assert [r["id"] for r in rows] == [events[0].id]
    warnings = archive_warnings(tmp_path)
    rel = {p: p.relative_to(tmp_path).as_posix() for p in (forged, foreign)}
    assert any(w.startswith(f"changed: {rel[forged]}") for w in warnings), warnings
    assert any(w.startswith(f"unlisted: {rel[foreign]}") for w in warnings), warnings


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(any_event, min_size=1, max_size=12))
def test_the_columnar_builder_makes_the_same_table_as_typed_row(events: list[Event]) -> None:
    """``typed_table`` (the writer's fast path) equals ``typed_row`` (the definition), row for row."""
    wires = [to_dict(e) for e in events]
    texts = [encode(e).decode() for e in events]
    offsets = list(range(7, 7 + len(events)))
    rows = [typed_row(w, stored_at=NOW, partition=2, offset=o, text=t) for w, o, t in zip(wires, offsets, texts)]
    expected = pa.Table.from_pylist(rows, schema=SCHEMA)
    got = typed_table(wires, texts, stored_at=NOW, partitions=[2] * len(events), offsets=offsets)
    assert got.equals(expected)


def test_a_correction_row_carries_the_corrected_figures():
    from ledger.events import RatingCorrected

    event = RatingCorrected(
        time=NOW, request_id="req-1", team="payments", sequence=1, admitted_at=datetime(2026, 11, 3, tzinfo=timezone.utc),
        currency="INR", old_price_version=2, price_version=3, old_cost_micro=2_730_820, cost_micro=273_082,
        old_cost_by_scope={"team:payments": 2_730_820}, cost_by_scope={"team:payments": 273_082},
        old_attempt_costs={"1": 2_730_820}, attempt_costs={"1": 273_082}, reason="typo")
    row = typed_row(to_dict(event), stored_at=NOW, partition=0, offset=9, text=encode(event).decode())
    assert (row["type"], row["team"], row["currency"]) == ("rating.corrected", "payments", "INR")
    assert (row["price_version"], row["cost_micro"]) == (3, 273_082)
    assert {e["scope"]: e["micro"] for e in row["scope_costs"]} == dict(event.cost_by_scope)
    assert row["attempts"] is None and row["attempt"] is None  # per-attempt costs stay in the event JSON
    assert orjson.loads(row["event"])["old_cost_micro"] == 2_730_820
