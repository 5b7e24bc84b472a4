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
* tokens: one column per ``pricing.usage.TOKEN_TYPES`` entry
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
from typing import Any

import pyarrow as pa

from ledger.codec import parse_time
from pricing.usage import TOKEN_TYPES

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
_DIRECT = frozenset(COLUMNS) - {"id", "type", "schema", "event_time", "stored_at", "log_partition", "log_offset",
                                "event", "tags", *TOKEN_COLUMNS, "usage_source", *_SCOPE_MAPS.values()}


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


def typed_table(wires: Sequence[Mapping[str, Any]], texts: Sequence[str], *, stored_at: datetime,
                partitions: Sequence[int], offsets: Sequence[int]) -> pa.Table:
    """The archive rows of many events, built column by column: the same table as
    ``pa.Table.from_pylist([typed_row(...) for each], schema=SCHEMA)``, several times faster (the writer's
    hot path). ``typed_row`` stays the definition; a property test holds the two equal."""
    n = len(wires)
    cols: dict[str, list[Any]] = {name: [None] * n for name in COLUMNS}
    ids, types, schemas, times = cols["id"], cols["type"], cols["schema"], cols["event_time"]
    renamed, direct, scope_maps = _RENAMED, _DIRECT, _SCOPE_MAPS
    for i, wire in enumerate(wires):
        ids[i], types[i], schemas[i], times[i] = wire["id"], wire["type"], wire["schema"], wire["time"]
        for field, value in wire.items():
            column = renamed.get(field, field)
            if column in direct:
                cols[column][i] = value
            elif field in scope_maps:
                cols[scope_maps[field]][i] = _scope_list(value)
            elif field == "tags":
                cols["tags"][i] = sorted(value.items())
            elif field == "usage":
                for kind in TOKEN_TYPES:
                    cols[f"{kind}_tokens"][i] = value[kind]
                cols["usage_source"][i] = value["source"]
    cols["event_time"] = pa.array(times, pa.string()).cast(SCHEMA.field("event_time").type)
    cols["stored_at"] = [stored_at] * n
    cols["log_partition"], cols["log_offset"], cols["event"] = list(partitions), list(offsets), list(texts)
    return pa.Table.from_arrays([c if isinstance(c := cols[f.name], pa.Array) else pa.array(c, type=f.type)
                                 for f in SCHEMA], schema=SCHEMA)
