"""The archive's row: typed columns for everything finance groups or sums by, plus the full event.

One row per event, whatever its type; a column an event type does not carry is
null. The typed columns are derived from the event's wire form
(``ledger.codec.to_dict``) by ``typed_row`` and never disagree with the
``event`` column, which keeps the full JSON the codec wrote, so a reader can
always re-derive them.

Column groups:

* envelope and provenance: ``id``, ``type``, ``schema``, ``event_time``,
  ``stored_at``, ``log_partition``, ``log_offset``;
* who: ``request_id``, ``attempt``, ``team``, ``business_unit``, ``app``,
  ``key_id``, ``run_id``, ``cost_centre``, ``tags`` (map), ``pod``;
* where: ``alias``, ``deployment``, ``provider``, ``account``, ``model``,
  ``region``, ``data_class``;
* how it went: ``outcome``, ``status`` (an attempt's status, a settlement's
  final status), ``error_code``, ``ttft_ms``, ``latency_ms``, ``attempts``,
  ``cache_hit``, ``stream``;
* tokens: one column per ``ledger.usage.TOKEN_TYPES`` entry
  (``input_tokens`` …), ``usage_source``, and the admission estimates;
* money (integer micro-units of ``currency``, never floats): ``cost_micro``,
  ``overrun_micro``, ``amount_micro`` (lease and threshold events),
  ``price_version``, and per-scope lists of ``{scope, micro}``: ``holds``
  (admitted), ``scope_costs`` (settled: cost by scope; expired: charged in
  full), ``hold_released`` (settled);
* scope events: ``scope``, ``lease_id``, ``period``.

A ``rating.corrected`` row (re-rating) carries the *corrected* figures in the
shared columns: ``price_version`` (the new version), ``cost_micro`` (the
request's new total) and ``scope_costs`` (its new cost per scope), with
``team`` and ``currency``; the figures it corrects (``old_price_version``,
``old_cost_micro``, ``old_cost_by_scope``), its ``sequence``, ``admitted_at``
and the per-attempt costs are read from ``event`` (a view's ``json_extract``).
So no column was added for it and the schema version did not change; filter
on ``type`` before summing ``cost_micro`` or ``scope_costs``.

``ARCHIVE_SCHEMA_VERSION`` is written into every file's Parquet metadata
(``farebox.archive_schema``). A reader refuses a file of a newer version with a
message naming it; any change to the columns bumps the version.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from itertools import accumulate
from operator import itemgetter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ledger.codec import parse_time
from ledger.usage import TOKEN_TYPES

ARCHIVE_SCHEMA_VERSION = 2
SCHEMA_METADATA_KEY = b"farebox.archive_schema"

SCOPE_MICRO = pa.struct([("scope", pa.string()), ("micro", pa.int64())])
_SCOPE_LIST = pa.list_(SCOPE_MICRO)

TOKEN_COLUMNS = tuple(f"{kind}_tokens" for kind in TOKEN_TYPES)

SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("type", pa.string()),
        ("schema", pa.int32()),
        ("event_time", pa.timestamp("us", tz="UTC")),
        ("stored_at", pa.timestamp("us", tz="UTC")),
        ("log_partition", pa.int32()),
        ("log_offset", pa.int64()),
        ("request_id", pa.string()),
        ("key", pa.string()),
        ("attempt", pa.int64()),
        ("team", pa.string()),
        ("business_unit", pa.string()),
        ("app", pa.string()),
        ("key_id", pa.string()),
        ("run_id", pa.string()),
        ("cost_centre", pa.string()),
        ("tags", pa.map_(pa.string(), pa.string())),
        ("pod", pa.string()),
        ("alias", pa.string()),
        ("deployment", pa.string()),
        ("provider", pa.string()),
        ("account", pa.string()),
        ("model", pa.string()),
        ("region", pa.string()),
        ("data_class", pa.string()),
        ("outcome", pa.string()),
        ("status", pa.int64()),
        ("error_code", pa.string()),
        ("ttft_ms", pa.int64()),
        ("latency_ms", pa.int64()),
        ("attempts", pa.int64()),
        ("cache_hit", pa.bool_()),
        ("stream", pa.bool_()),
        *[(name, pa.int64()) for name in TOKEN_COLUMNS],
        ("usage_source", pa.string()),
        ("est_input_tokens", pa.int64()),
        ("max_output_tokens", pa.int64()),
        ("cost_micro", pa.int64()),
        ("overrun_micro", pa.int64()),
        ("amount_micro", pa.int64()),
        ("currency", pa.string()),
        ("price_version", pa.int64()),
        ("holds", _SCOPE_LIST),
        ("scope_costs", _SCOPE_LIST),
        ("hold_released", _SCOPE_LIST),
        ("scope", pa.string()),
        ("lease_id", pa.string()),
        ("period", pa.string()),
        ("event", pa.string()),
    ],
    metadata={SCHEMA_METADATA_KEY: str(ARCHIVE_SCHEMA_VERSION).encode()},
)

COLUMNS = tuple(SCHEMA.names)

# wire field -> column, where the names differ or one column gathers several event types' fields
_RENAMED = {"final_status": "status"}
_SCOPE_MAPS = {"holds": "holds", "cost_by_scope": "scope_costs", "charged": "scope_costs",
               "hold_released": "hold_released"}
_ENVELOPE = frozenset({"id", "type", "schema", "event_time", "stored_at", "log_partition", "log_offset", "event"})
_DIRECT = frozenset(COLUMNS) - _ENVELOPE - {"tags", *TOKEN_COLUMNS, "usage_source", *_SCOPE_MAPS.values()}
_TYPED = tuple(f for f in SCHEMA if f.name not in _ENVELOPE)  # the columns that depend on the event's type
GROUPED = ("id", "type", "schema", "event_time", *(f.name for f in _TYPED))  # built per group of like events
_TIME = SCHEMA.field("event_time").type
_TAGS = SCHEMA.field("tags").type
CHUNK = 512  # events decoded and turned into columns at a time, while their Python objects are still in cache
_NULLS = {column.name: pa.nulls(CHUNK, column.type) for column in _TYPED}  # sliced for a group without one


INT64 = range(-(2**63), 2**63)  # what the archive's integer columns (and DuckDB's JSON reading of ``event``) hold
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_WIDE_RUN = b"0" * 19  # every integer outside INT64 has 19 digits or more


def has_wide_digits(data: bytes) -> bool:
    """Whether ``data`` (JSON) has a run of 19 digits, as any integer outside ``INT64`` does: each digit made
    "0" and the run searched for, both in C (a regular expression takes many times as long)."""
    return _WIDE_RUN in data.translate(_DIGITS_AS_ZERO)


def _holds_wide(value: Any) -> bool:
    if type(value) is int:
        return value not in INT64
    if type(value) is dict:
        return any(map(_holds_wide, value.values()))
    if type(value) is list:
        return any(map(_holds_wide, value))
    return False


def too_wide(wire: Mapping[str, Any]) -> ValueError | None:
    """Why an event that reads cannot be archived: a field holding an integer outside 64 bits; else None.
    The archive refuses such a record as unreadable (kept apart with this reason), never half-writes it."""
    for field, value in wire.items():
        if _holds_wide(value):
            return ValueError(f"{field} holds an integer outside 64 bits, which the archive cannot hold")
    return None


def _scope_list(value: Mapping[str, int]) -> list[dict[str, Any]]:
    return [{"scope": scope, "micro": micro} for scope, micro in sorted(value.items())]


def typed_row(wire: Mapping[str, Any], *, stored_at: datetime, partition: int, offset: int,
              text: str) -> dict[str, Any]:
    """The archive row of one event in wire form (already checked by ``ledger.codec.from_dict``).

    ``text`` is the event's JSON as it was stored; every column the event does
    not carry is None."""
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(id=wire["id"], type=wire["type"], schema=wire["schema"], event_time=parse_time(wire["time"]),
               stored_at=stored_at, log_partition=partition, log_offset=offset, event=text)
    for field, value in wire.items():
        column = _RENAMED.get(field, field)
        if column in _DIRECT:
            row[column] = value
        elif field in _SCOPE_MAPS:
            row[_SCOPE_MAPS[field]] = _scope_list(value)
        elif field == "tags":
            row["tags"] = sorted(value.items())
        elif field == "usage":
            for kind in TOKEN_TYPES:
                row[f"{kind}_tokens"] = value[kind]
            row["usage_source"] = value["source"]
    return row


def schema_version_of(metadata: Mapping[bytes, bytes] | None) -> int:
    """The archive schema version a Parquet file declares (1: written before versions were recorded)."""
    raw = (metadata or {}).get(SCHEMA_METADATA_KEY)
    return int(raw) if raw is not None else 1


@lru_cache(maxsize=256)
def _plan(fields: tuple[str, ...]) -> dict[str, tuple[str, str]]:
    """Typed column -> (how, wire field) for events whose wire keys are ``fields``, in that order: exactly the
    assignments ``typed_row`` makes (a later field overrides an earlier one that fills the same column)."""
    plan: dict[str, tuple[str, str]] = {}
    for field in fields:
        column = _RENAMED.get(field, field)
        if column in _DIRECT:
            plan[column] = ("direct", field)
        elif field in _SCOPE_MAPS:
            plan[_SCOPE_MAPS[field]] = ("scopes", field)
        elif field == "tags":
            plan["tags"] = ("tags", field)
        elif field == "usage":
            for kind in TOKEN_TYPES:
                plan[f"{kind}_tokens"] = ("usage", kind)
            plan["usage_source"] = ("usage", "source")
    return plan


def _scope_lists(maps: Sequence[Mapping[str, int]]) -> pa.Array:
    """``_scope_list`` of each map, as one list<struct<scope, micro>> array."""
    return pa.array(list(map(sorted, map(dict.items, maps))), _SCOPE_LIST)  # a struct is read from a tuple


def _tag_maps(maps: Sequence[Mapping[str, str]]) -> pa.Array:
    """Each map's items sorted by key, as one map<string, string> array (``typed_row``'s ``tags``)."""
    return pa.array(list(map(sorted, map(dict.items, maps))), _TAGS)


@lru_cache(maxsize=256)
def used_fields(fields: tuple[str, ...]) -> tuple[str, ...]:
    """Of the wire keys ``fields``, the ones ``group_arrays`` reads (the envelope and the planned fields),
    in their order: all a trusted batch needs transposed."""
    used = {"id", "type", "schema", "time", *(field for how, field in _plan(fields).values() if how != "usage")}
    if any(how == "usage" for how, _ in _plan(fields).values()):
        used.add("usage")
    return tuple(field for field in fields if field in used)


def by_shape(wires: Sequence[Mapping[str, Any]]) -> dict[tuple[str, ...], list[int]]:
    """The positions of ``wires`` by their keys in order (one group per event type and schema, in practice)."""
    rows_of: dict[tuple[str, ...], list[int]] = {}
    for i, wire in enumerate(wires):
        rows = rows_of.get(shape := tuple(wire))
        if rows is None:
            rows_of[shape] = [i]
        else:
            rows.append(i)
    return rows_of


def transposed(wires: Sequence[Mapping[str, Any]], fields: tuple[str, ...]) -> dict[str, tuple[Any, ...]]:
    """The columns (wire field -> values) of events that all have the keys ``fields``.

    Each event is read once (``itemgetter`` of every key) and the values transposed: reading the events key
    by key instead walks every event's dict once per column, which costs more than the reads."""
    if len(fields) < 2 or not wires:
        return {field: tuple(w[field] for w in wires) for field in fields}
    return dict(zip(fields, zip(*map(itemgetter(*fields), wires))))


def group_arrays(fields: tuple[str, ...], columns: Mapping[str, Sequence[Any]], n: int) -> list[pa.Array]:
    """The ``GROUPED`` columns of ``n`` events that all have the keys ``fields``, from their ``columns``."""
    plan = _plan(fields)
    if any(how == "usage" for how, _ in plan.values()):
        usage = transposed(columns["usage"], (*TOKEN_TYPES, "source"))
    out = [pa.array(columns["id"], pa.string()), pa.array(columns["type"], pa.string()),
           pa.array(columns["schema"], pa.int32()), pa.array(columns["time"], pa.string())]
    for column in _TYPED:
        how, field = plan.get(column.name, ("null", ""))
        if how == "direct":
            out.append(pa.array(columns[field], column.type))
        elif how == "usage":
            out.append(pa.array(usage[field], column.type))
        elif how == "scopes":
            out.append(_scope_lists(columns[field]))
        elif how == "tags":
            out.append(_tag_maps(columns[field]))
        else:
            out.append(_NULLS[column.name].slice(0, n) if n <= CHUNK else pa.nulls(n, column.type))
    return out


Part = tuple[list[int], list[pa.Array]]  # the indices (into the caller's events) of some rows, their GROUPED arrays


def concatenated(parts: Sequence[Part]) -> list[pa.Array]:
    """The ``GROUPED`` arrays of all of ``parts``' rows, in the parts' order."""
    if len(parts) == 1:
        return parts[0][1]
    return [pa.concat_arrays([arrays[c] for _, arrays in parts]) for c in range(len(GROUPED))]


def _texts(texts: Sequence[str] | Sequence[bytes]) -> pa.Array:
    """The ``event`` column: str as given; UTF-8 bytes laid out as one joined buffer and its offsets, checked
    to be UTF-8 once for the whole column (no per-row string is made)."""
    if not texts or isinstance(texts[0], str):
        return pa.array(texts, pa.string())
    data = b"".join(texts)
    if len(data) >= 2**31:  # past what int32 offsets address: let Arrow say so as for any other input
        return pa.array(texts, pa.binary()).cast(pa.string())
    offsets = pa.array(list(accumulate(map(len, texts), initial=0)), pa.int32())
    array = pa.Array.from_buffers(pa.string(), len(texts), [None, offsets.buffers()[1], pa.py_buffer(data)])
    array.validate(full=True)
    return array


def assemble(grouped: Sequence[pa.Array], texts: Sequence[str] | Sequence[bytes], *, stored_at: datetime,
             partitions: Sequence[int], offsets: Sequence[int]) -> pa.Table:
    """The archive table of some events from their ``GROUPED`` arrays (``concatenated``), their ``texts``,
    ``partitions`` and ``offsets``, all in the order of the rows."""
    n = len(texts)
    columns = dict(zip(GROUPED, grouped))
    columns["event"] = _texts(texts)
    columns["event_time"] = columns["event_time"].cast(_TIME)
    columns["stored_at"] = pa.repeat(pa.scalar(stored_at, _TIME), n)
    columns["log_partition"] = pa.array(partitions, pa.int32())
    columns["log_offset"] = pa.array(offsets, pa.int64())
    return pa.Table.from_arrays([columns[name] for name in COLUMNS], schema=SCHEMA)


def typed_table(wires: Sequence[Mapping[str, Any]], texts: Sequence[str] | Sequence[bytes], *,
                stored_at: datetime, partitions: Sequence[int], offsets: Sequence[int]) -> pa.Table:
    """The archive rows of many events (``texts``: their stored JSON, str or UTF-8 bytes), built column by
    column: the same table as ``pa.Table.from_pylist([typed_row(...) for each], schema=SCHEMA)``, many times
    faster (the writer's hot path: ``streams.archive.batch`` makes the same calls). ``typed_row`` stays the
    definition; property tests hold the two equal."""
    parts: list[Part] = []
    for start in range(0, len(wires), CHUNK):
        chunk = wires[start:start + CHUNK]
        for fields, rows in by_shape(chunk).items():
            group = chunk if len(rows) == len(chunk) else [chunk[i] for i in rows]
            parts.append(([start + i for i in rows], group_arrays(fields, transposed(group, fields), len(rows))))
    if not parts:
        return SCHEMA.empty_table()
    grouped = concatenated(parts)
    if len(parts) > 1:  # back to the order given
        back = pc.sort_indices(pa.array([i for rows, _ in parts for i in rows], pa.int64()))
        grouped = [array.take(back) for array in grouped]
    return assemble(grouped, texts, stored_at=stored_at, partitions=partitions, offsets=offsets)
