"""The writer's batch path (decoded in chunks, checked a group at a time, built column by column) writes the
same files, byte for byte, as the row-by-row definition: every record through ``from_dict`` when checking,
then refused if it holds an integer outside 64 bits (``too_wide``), ``typed_row`` for each row, files by (partition, date, hour), rows by offset; and refuses the same records
for the same reasons."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.codec import encode, from_dict, to_dict
from streams.archive.batch import read_batch
from streams.archive.schema import CHUNK, SCHEMA, too_wide, typed_row
from streams.archive.write import ArchiveWriter, Record, parquet_bytes
from streams.dead_letters import READ_ERRORS, reason_of
from tests.ledger.event_strategies import any_event
from tests.ledger.wire_mutations import PALETTE, mutated

NOW = datetime(2026, 12, 1, 9, 30, tzinfo=timezone.utc)
NOT_EVENTS = [b"not json", b"\xff\xfe", b'["a list"]', b"null", b"17", b'"text"', b'{"type": "request.admitted"}',
              b'{"time": 5}', b'{"time": ["2026"]}', b'{"time": {"a": 1}}', b'{"time": "2026-10-03T10:15:02.123456Z"}']


def definition(records: list[Record], trusted: bool) -> tuple[dict[str, bytes], list[tuple]]:
    """The archive of ``records`` as defined row by row: each typed file's bytes by path, the refusals."""
    groups: dict[tuple, list[tuple[Record, dict]]] = defaultdict(list)
    refused = []
    for record in records:
        try:
            wire = orjson.loads(record.value)
            if not trusted:
                from_dict(wire)
            at = wire["time"]
            key = (record.partition, at[:10], at[11:13])
            if (wide := too_wide(wire)) is not None:
                raise wide
            groups[key].append((record, wire))
        except READ_ERRORS as exc:
            refused.append((record.partition, record.offset, reason_of(exc), record.value))
    files = {}
    for (partition, day, hour), group in sorted(groups.items()):
        group.sort(key=lambda rw: rw[0].offset)
        rows = [typed_row(w, stored_at=NOW, partition=partition, offset=r.offset, text=r.value.decode())
                for r, w in group]
        name = f"date={day}/hour={hour}/part-{partition}-{group[0][0].offset:020d}-{group[-1][0].offset:020d}.parquet"
        files[name] = parquet_bytes(pa.Table.from_pylist(rows, schema=SCHEMA))
    return files, sorted(refused)


def written(root: Path, records: list[Record], trusted: bool) -> tuple[dict[str, bytes], list[tuple]]:
    paths = ArchiveWriter(root, "test").write(records, now=NOW, trusted=trusted)
    files = {p.relative_to(root).as_posix(): p.read_bytes() for p in paths if "_unreadable" not in p.parts}
    refused = [(r["log_partition"], r["log_offset"], r["reason"], r["value"])
               for p in paths if "_unreadable" in p.parts for r in pq.read_table(p).to_pylist()]
    return files, sorted(refused)


def built(records: list[Record], trusted: bool) -> tuple[dict[str, bytes], list[tuple]]:
    """What the writer would write, without the disk: each file's bytes by path, the refusals."""
    batch = read_batch(records, trusted, NOW)
    files = {}
    for (partition, day, hour), table in batch.files:
        first, last = table.column("log_offset")[0].as_py(), table.column("log_offset")[-1].as_py()
        files[f"date={day}/hour={hour}/part-{partition}-{first:020d}-{last:020d}.parquet"] = parquet_bytes(table)
    refused = [(records[i].partition, records[i].offset, reason_of(exc), records[i].value)
               for i, exc in batch.refused.items()]
    return files, sorted(refused)


def assert_same_archive(root: Path | None, records: list[Record], trusted: bool) -> None:
    files, refused = written(root, records, trusted) if root else built(records, trusted)
    expected_files, expected_refused = definition(records, trusted)
    assert refused == expected_refused
    assert sorted(files) == sorted(expected_files)
    for name, data in files.items():
        assert data == expected_files[name], name


@st.composite
def batches(draw, wrong: bool) -> list[Record]:
    """Events of every type over a few partitions, in any order; with ``wrong``, some records made wrong or
    not events (a trusted batch is only what the codec wrote)."""
    events = draw(st.lists(any_event, min_size=1, max_size=30))
    values = [encode(e) for e in events]
    for at in draw(st.lists(st.integers(0, len(values) - 1), max_size=6)) if wrong else ():
        wire = to_dict(events[at])
        field = draw(st.sampled_from(sorted(wire)))
        how = draw(st.sampled_from(["set", "rederive", "nested", "drop", "add"]))
        values[at] = json.dumps(mutated(wire, how, field, draw(st.sampled_from(PALETTE)))).encode()
    values += draw(st.lists(st.sampled_from(NOT_EVENTS), max_size=3)) if wrong else []
    partitions = draw(st.lists(st.integers(0, 2), min_size=len(values), max_size=len(values)))
    records = [Record(p, 100 + n, v) for n, (p, v) in enumerate(zip(partitions, values))]
    return draw(st.permutations(records))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches(wrong=True))
def test_a_checked_batch_makes_the_files_and_refusals_the_definition_makes(records):
    assert_same_archive(None, records, trusted=False)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches(wrong=False))
def test_a_trusted_batch_makes_the_files_the_definition_makes(records):
    assert_same_archive(None, records, trusted=True)


def test_a_large_batch_of_real_events_with_poison_in_several_chunks(tmp_path):
    """Several chunks and hours, two partitions, every kind of wrong record among them: the writer writes
    the same files and refusals as the definition (and the same events trusted)."""
    from tests.bench.finance.measure import real_events

    events = real_events(CHUNK)  # about 3 chunks of records
    values = [encode(e) for e in events]
    wrong = 0
    for field in ["cost_micro", "team", "attempt", "time", "usage", "holds", "id", "schema"]:
        for how, value in (("set", -1), ("rederive", ""), ("set", True), ("nested", -5), ("drop", None)):
            at = 7 + 37 * wrong
            wire = to_dict(events[at])
            if field in wire:
                values[at] = json.dumps(mutated(wire, how, field, value)).encode()
            wrong += 1
    values[CHUNK - 1: CHUNK - 1] = NOT_EVENTS  # across a chunk boundary
    records = [Record(n % 2, 1_000 + n, v) for n, v in enumerate(values)]
    assert_same_archive(tmp_path / "checked", records, trusted=False)
    _, refused = definition(records, trusted=False)
    assert len(refused) > len(NOT_EVENTS) + 20
    assert_same_archive(tmp_path / "trusted", [Record(n % 2, 1_000 + n, encode(e)) for n, e in enumerate(events)],
                        trusted=True)


def test_every_wrong_record_is_refused_with_the_codecs_reason(tmp_path):
    from tests.bench.finance.measure import real_events

    events = real_events(20)
    records, expected = [], []
    for n, event in enumerate(events):
        wire = to_dict(event)
        bad = mutated(wire, "rederive", "team", "") if n % 3 == 0 else wire
        records.append(Record(0, n, json.dumps(bad).encode()))
        if bad is not wire:
            with pytest.raises(READ_ERRORS) as info:
                from_dict(bad)
            expected.append((0, n, reason_of(info.value), records[-1].value))
    files, refused = written(tmp_path, records, trusted=False)
    assert refused == expected and len(expected) == len(events) // 3 + 1
    rows = sum(pq.read_metadata(tmp_path / name).num_rows for name in files)
    assert rows == len(events) - len(expected)


@pytest.mark.parametrize("trusted", [False, True])
def test_an_integer_outside_64_bits_is_refused_as_unreadable_not_a_crash(tmp_path, trusted):
    """``from_dict`` reads a cost of 2**63 (a Python int), but no int64 column or JSON reader holds it: the
    record is refused with a reason naming the field, wherever the integer is (a typed column, a scope map,
    a field only the event JSON keeps); 19 digits inside a string, or 2**63 - 1, are archived as usual."""
    from tests.bench.finance.measure import real_events

    events = real_events(CHUNK // 3 + 40)  # the wide records in two chunks
    values = [encode(e) for e in events]
    edits = {}
    for at, (field, value) in zip((4, 9, 17, CHUNK + 5, CHUNK + 6, CHUNK + 30), (
            ("cost_micro", 2**63), ("cost_micro", 2**64 - 1), ("holds", 2**63), ("privacy_policy_version", 2**63),
            ("team", "team-" + "9" * 25), ("latency_ms", 2**63 - 1))):
        wire = to_dict(events[at])
        if field not in wire:
            at += 1
            wire = to_dict(events[at])
        assert field in wire, (at, field)
        wire[field] = {k: value for k in wire[field]} if isinstance(wire[field], dict) else value
        if field == "team":
            wire["key"] = value  # the envelope's key is the team
        values[at] = json.dumps(wire).encode()
        edits[at] = field
    records = [Record(0, n, v) for n, v in enumerate(values)]
    files, refused = written(tmp_path, records, trusted=trusted)
    reasons = {offset: reason for _, offset, reason, _ in refused}
    wide = {at: field for at, field in edits.items() if field not in ("team", "latency_ms")}
    assert sorted(reasons) == sorted(wide)
    for at, field in wide.items():
        # the codec refuses a money or count field past 2**63 itself; the archive, any other integer
        assert reasons[at] in (f"ValueError: {field} holds an integer outside 64 bits, which the archive cannot hold",
                               ) or (reasons[at].startswith("CodecError: ") and f".{field}" in reasons[at]
                                     and "below 2**63" in reasons[at]), reasons[at]
    rows = sum(pq.read_metadata(tmp_path / name).num_rows for name in files)
    assert rows == len(records) - len(wide)
    assert_same_archive(tmp_path / "again", records, trusted=trusted)


def test_a_trusted_log_holding_a_record_the_encoder_never_wrote_is_checked_and_refuses_it(tmp_path):
    """A hand-edited embedded log (trusted): a cost of 2**70 (orjson reads it as a float, which no int64
    column takes) makes the writer check the whole batch, so that record is refused like any other and
    the rest are archived, the same as checked."""
    from tests.bench.finance.measure import real_events

    records = [Record(0, 1 + n, encode(e)) for n, e in enumerate(real_events(6))]
    at = next(i for i, r in enumerate(records) if orjson.loads(r.value)["type"] == "request.settled")
    wire = orjson.loads(records[at].value)
    text = records[at].value.decode().replace(f'"cost_micro":{wire["cost_micro"]}', f'"cost_micro":{2**70}')
    records[at] = Record(0, records[at].offset, text.encode())
    files, refused = written(tmp_path / "trusted", records, trusted=True)
    assert [offset for _, offset, _, _ in refused] == [records[at].offset]
    assert (files, refused) == written(tmp_path / "checked", records, trusted=False)
