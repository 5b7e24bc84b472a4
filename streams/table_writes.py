"""Faust table writes whose changelog partition is chosen by the caller.

A Faust table sends each write to the changelog partition of the event being
processed (``Table.partition_for_key`` reads ``current_event()``), so that a
worker that owns source partition *p* recovers exactly the keys written while
processing *p*. The worker's agents process batches (``Stream.take_events``)
that span partitions and write each touched key once per batch, after the
batch; ``current_event()`` is then only the batch's last event. These helpers
do what ``Table.__setitem__`` / ``__delitem__`` do (``on_key_set``: send the
changelog record; then update the in-memory store) with the partition of the
event that produced the value.

``PartitionView`` is a mapping bound to one partition, for code written
against ``MutableMapping`` (``ledger.retention.forget_due``). Only the
memory store is used (``store="memory://"``), so there are no key TTLs or
RocksDB writes to keep in step.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

import faust


def put(table: faust.Table, partition: int, key: Any, value: Any) -> None:
    """``table[key] = value`` with its changelog record in ``partition``."""
    table.send_changelog(partition, key, value)
    table.data[key] = value


def delete(table: faust.Table, partition: int, key: Any) -> None:
    """``del table[key]`` with its tombstone in ``partition`` (nothing if absent)."""
    if key in table.data:
        table.send_changelog(partition, key, None, value_serializer="raw")
        del table.data[key]


class PartitionView(MutableMapping[str, Any]):
    """A table seen as a mapping whose writes go to one changelog partition."""

    def __init__(self, table: faust.Table, partition: int) -> None:
        self.table = table
        self.partition = partition

    def __getitem__(self, key: str) -> Any:
        return self.table.data[key]

    def __setitem__(self, key: str, value: Any) -> None:
        put(self.table, self.partition, key, value)

    def __delitem__(self, key: str) -> None:
        if key not in self.table.data:
            raise KeyError(key)
        delete(self.table, self.partition, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.table.data)

    def __len__(self) -> int:
        return len(self.table.data)
