"""Per-minute rollups: team × key × alias × deployment × minute.

One row per closed request (settled or expired), at the minute of its
settlement (UTC): requests, tokens by type, cost, errors (final status >= 400,
or expired), and TTFT (sum and count of the attempts that reported one), so
a dashboard can add rows without reading events. Pure.

Idempotent like the scope ledger. The splitter sends, per rollup key and
batch, one ``fb.rollups`` record of the rows of its closes, each with the
``fb.requests`` offset of the close (``rows_record``); a key's rows all come
from one source partition (its team's). The total (``RollupTotal``, the
``rollups`` table's value) keeps the high-water offset per source and
``apply_rows`` adds only rows above it. So a record delivered twice, or rows
sent again by a splitter that crashed before recording its request states,
count once. Records from before (``[None, counts]``) are added as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ledger.events import Event, RequestSettled
from ledger.usage import TOKEN_TYPES

COUNTERS = ("requests", *TOKEN_TYPES, "cost_micro", "errors", "ttft_ms_sum", "ttft_count")


@dataclass(frozen=True, slots=True)
class Rollup:
    team: str
    key_id: str
    alias: str
    deployment: str
    minute: str  # "2026-10-03T10:15" UTC
    counts: dict[str, int]

    @property
    def key(self) -> str:
        return "|".join((self.team, self.key_id, self.alias, self.deployment, self.minute))


def rollup_of(state: dict[str, Any], event: Event) -> Rollup:
    """The row one closed request adds (``state`` is its open request state from ``ledger.splitting``)."""
    t = event.time
    minute = f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}"
    counts = dict.fromkeys(COUNTERS, 0)
    counts["requests"] = 1
    ttfts = [ms for _, ms in state.get("ttft", [])]
    counts["ttft_ms_sum"], counts["ttft_count"] = sum(ttfts), len(ttfts)
    if isinstance(event, RequestSettled):
        for kind in TOKEN_TYPES:
            counts[kind] = getattr(event.usage, kind)
        counts["cost_micro"] = event.cost_micro
        counts["errors"] = int(event.final_status >= 400)
        deployment = event.deployment or "-"
    else:  # expired: charged in full, counted as an error
        counts["cost_micro"] = max(event.charged.values(), default=0)  # type: ignore[attr-defined]
        counts["errors"] = 1
        deployment = "-"
    return Rollup(state["team"], state["key"], state["alias"], deployment, minute, counts)


def merge(total: dict[str, int] | None, row: dict[str, int]) -> dict[str, int]:
    out = dict(total or dict.fromkeys(COUNTERS, 0))
    for name, value in row.items():
        out[name] = out.get(name, 0) + value
    return out


def rows_record(source: str, rows: list[tuple[int, dict[str, int]]]) -> dict[str, Any]:
    """The ``fb.rollups`` record of one key's rows in a batch: (source offset, counts) in source order."""
    return {"source": source, "rows": [[offset, [counts.get(name, 0) for name in COUNTERS]] for offset, counts in rows]}


@dataclass(slots=True)
class RollupTotal:
    """A rollup key's running total and the high-water ``fb.requests`` offset per source partition."""

    counts: dict[str, int]
    high_water: dict[str, int]

    @classmethod
    def from_value(cls, value: Any) -> RollupTotal:
        """From the table's value; None (new key) or a plain counts dict (written before high-water marks)."""
        if value is None:
            return cls(dict.fromkeys(COUNTERS, 0), {})
        if "counts" in value and "hw" in value:
            return cls(dict(value["counts"]), dict(value["hw"]))
        return cls(dict(value), {})

    def to_value(self) -> dict[str, Any]:
        return {"counts": self.counts, "hw": self.high_water}


def check_record(record: Any) -> None:
    """A ``ValueError`` unless ``record`` is a ``fb.rollups`` record ``apply_rows`` can add whole: integer
    offsets and counters (money is never a float), as many counters as ``COUNTERS``. Checked before anything
    is added, so a malformed record leaves the total as it was."""
    if isinstance(record, list):  # [None, counts]: a record from before rows carried offsets
        if len(record) != 2 or not isinstance(record[1], dict) \
                or not all(isinstance(k, str) and type(v) is int for k, v in record[1].items()):
            raise ValueError("malformed rollup record (old form): expected [null, {counter: integer}]")
        return
    if not isinstance(record, dict) or not isinstance(record.get("source"), str) \
            or not isinstance(record.get("rows"), list):
        raise ValueError("malformed rollup record: expected {source: string, rows: list}")
    for row in record["rows"]:
        if not isinstance(row, list) or len(row) != 2 or type(row[0]) is not int or not isinstance(row[1], list):
            raise ValueError("malformed rollup row: expected [offset, [counters]]")
        if len(row[1]) != len(COUNTERS):
            raise ValueError(f"a rollup row has {len(row[1])} counters, expected {len(COUNTERS)}")
        if not all(type(value) is int for value in row[1]):
            raise ValueError("a rollup row has a counter that is not an integer")


def apply_rows(total: RollupTotal, record: Any) -> int:
    """Add a ``fb.rollups`` record's rows above the source's high-water mark; returns how many were added.
    The record is checked whole first (``check_record``)."""
    check_record(record)
    if isinstance(record, list):
        _, counts = record
        total.counts = merge(total.counts, counts)
        return 1
    source, rows = record["source"], record["rows"]
    high = total.high_water.get(source, -1)
    added = 0
    for offset, values in rows:
        if offset <= high:
            continue
        counts = total.counts
        for name, value in zip(COUNTERS, values):
            counts[name] = counts.get(name, 0) + value
        high = offset
        added += 1
    if added:
        total.high_water[source] = high
    return added
