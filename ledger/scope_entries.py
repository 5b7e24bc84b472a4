"""Scope entries: one request event's effect on one budget scope, as the ledger processor reads it.

``ledger.splitting`` splits each request event of ``fb.requests`` into one
``ScopeEntry`` per scope it touches (``admit`` opens a hold, ``close``
replaces it by a charge) and writes them to ``fb.scope-entries``, batched per
scope. An entry carries the ``fb.requests`` partition and offset it was split
from: a scope skips an entry at or below the high-water offset of its source. A ``correct`` entry
(re-rating) adds ``charge`` (new - old cost, may be negative) to the settled money.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from ledger.codec import format_time, parse_time

ENTRY_TYPE = "scope.entry"
# A batch of one scope's entries, in order: ``{"type": ENTRIES_TYPE, "scope": s, "rows": [row, ...]}`` with rows
# from ``ScopeEntry.to_row`` (positional, the time in epoch microseconds: no key names or ISO time to parse per
# entry). Batches written before rows, ``{"type": ENTRIES_TYPE, "entries": [entry wire, ...]}``, are still read.
ENTRIES_TYPE = "scope.entries"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICRO = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class ScopeEntry:
    """One request event's effect on one scope; ``id`` is ``{event id}@{scope}``."""

    kind: Literal["admit", "close", "correct"]
    scope: str
    event_id: str
    request_id: str
    period: str  # the admission's budget month: a settlement is charged there
    hold: int
    charge: int  # close: what is charged (settled cost, or the full hold on expiry); correct: new - old; admit: 0
    lease_id: str | None
    time: datetime
    source: str = ""  # the fb.requests partition it was split from ("" : unknown, no high-water dedupe)
    offset: int = -1

    @property
    def id(self) -> str:
        return f"{self.event_id}@{self.scope}"

    def to_wire(self) -> dict[str, Any]:
        return {"type": ENTRY_TYPE, "kind": self.kind, "scope": self.scope, "event_id": self.event_id,
                "request_id": self.request_id, "period": self.period, "hold": self.hold, "charge": self.charge,
                "lease_id": self.lease_id, "time": format_time(self.time), "source": self.source,
                "offset": self.offset}

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> ScopeEntry:
        return cls(d["kind"], d["scope"], d["event_id"], d["request_id"], d["period"], d["hold"], d["charge"],
                   d["lease_id"], parse_time(d["time"]), d["source"], d["offset"])

    def to_row(self) -> list[Any]:
        """The entry in a batch of its scope's (``ENTRIES_TYPE``): positional, without the scope."""
        return [self.kind, self.event_id, self.request_id, self.period, self.hold, self.charge, self.lease_id,
                (self.time - _EPOCH) // _MICRO, self.source, self.offset]

    @classmethod
    def from_row(cls, scope: str, row: list[Any]) -> ScopeEntry:
        kind, event_id, request_id, period, hold, charge, lease_id, micros, source, offset = row
        if kind not in ("admit", "close", "correct") or type(hold) is not int or type(charge) is not int \
                or type(micros) is not int or type(offset) is not int:
            raise ValueError(f"malformed scope entry row {row!r}")
        return cls(kind, scope, event_id, request_id, period, hold, charge, lease_id, _EPOCH + micros * _MICRO,
                   source, offset)


def entries_batch(scope: str, rows: list[list[Any]]) -> dict[str, Any]:
    """The record of a batch of one scope's entries (rows from ``ScopeEntry.to_row``, in order)."""
    return {"type": ENTRIES_TYPE, "scope": scope, "rows": rows}


def entries_of(record: dict[str, Any]) -> list[ScopeEntry]:
    """The entries of an ``ENTRIES_TYPE`` record, rows or (older) wire dicts."""
    rows = record.get("rows")
    if rows is not None:
        scope = record["scope"]
        return [ScopeEntry.from_row(scope, row) for row in rows]
    return [ScopeEntry.from_wire(wire) for wire in record["entries"]]
