"""Faust table writes whose changelog partition is chosen by the caller, produced in one go per flush.

A Faust table sends each write to the changelog partition of the event being
processed (``Table.partition_for_key`` reads ``current_event()``), so that a
worker that owns source partition *p* recovers exactly the keys written while
processing *p*. The worker's agents flush batches of events that span
partitions and write each touched key once per flush, after the batch;
``current_event()`` is then only some later event. ``TableWrites`` does what
``Table.__setitem__`` / ``__delitem__`` do (send the changelog record, update
the in-memory store) with the partition of the event that produced the value.

It does not go through ``Table.send_changelog``, which builds a Faust
``FutureMessage`` per record and hands records to aiokafka one at a time
(most of a flush's cost). Here a flush's records are serialized exactly as the table's changelog codec
does (``json`` key and value, the defaults of ``app.Table``; a delete is a
tombstone, a null value) and appended to one aiokafka ``BatchBuilder`` per
changelog partition (more when one fills up), submitted with ``send_batch``;
``produce`` returns the futures that resolve when Kafka has them, which the
agents await before acknowledging the flush's events. Faust's recovery reads
these records like its own (``tests/streams/test_table_writes.py`` checks the
bytes against the changelog topic's own serialization). Only the memory store
is used (``store="memory://"``), so there are no key TTLs or RocksDB offsets
(``Table._on_changelog_sent``) to keep in step.

``send_keyed`` produces keyed records (the splitter's entries and rollup
rows) the same direct way, partitioned by the producer's partitioner as
``Topic.send`` would. ``PartitionView`` is a mapping bound to one partition,
for code written against ``MutableMapping`` (``ledger.retention.forget_due``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, MutableMapping
from typing import Any

import faust
import orjson
from aiokafka.partitioner import DefaultPartitioner

from streams.kafka.internals import aiokafka_producer


class TableWrites:
    """The table writes of one flush: the in-memory stores change at once, the changelog records on ``produce``."""

    def __init__(self, app: faust.App) -> None:
        self.app = app
        self.records: dict[tuple[str, int], list[tuple[bytes, bytes | None]]] = {}
        self.topics: dict[int, str] = {}  # id(table) -> its changelog topic's name

    def _add(self, table: faust.Table, partition: int, key: bytes, value: bytes | None) -> None:
        topic = self.topics.get(id(table))
        if topic is None:
            topic = self.topics[id(table)] = table.changelog_topic.get_topic_name()
        records = self.records.get((topic, partition))
        if records is None:
            records = self.records[(topic, partition)] = []
        records.append((key, value))

    def put(self, table: faust.Table, partition: int, key: str, value: Any) -> None:
        """``table[key] = value`` with its changelog record in ``partition``."""
        self._add(table, partition, orjson.dumps(key), orjson.dumps(value))
        table.data[key] = value

    def delete(self, table: faust.Table, partition: int, key: str) -> None:
        """``del table[key]`` with its tombstone in ``partition`` (nothing if absent)."""
        if key in table.data:
            self._add(table, partition, orjson.dumps(key), None)
            del table.data[key]

    def __len__(self) -> int:
        return sum(len(records) for records in self.records.values())

    async def produce(self) -> list[asyncio.Future]:
        """Hand the records gathered so far to the producer, in order per partition; then start afresh.

        The futures resolve when Kafka has acknowledged each batch (``producer_acks``)."""
        records, self.records = self.records, {}
        if not records:
            return []
        producer = aiokafka_producer(self.app)
        sent = []
        for (topic, partition), items in records.items():
            batch = producer.create_batch()
            for key, value in items:
                if batch.append(key=key, value=value, timestamp=None) is None:  # full: send it, go on in a new one
                    sent.append(await producer.send_batch(batch, topic, partition=partition))
                    batch = producer.create_batch()
                    batch.append(key=key, value=value, timestamp=None)  # the first record always fits
            sent.append(await producer.send_batch(batch, topic, partition=partition))
        return sent

    async def write(self) -> None:
        """``produce`` and wait until Kafka has every record."""
        sent = await self.produce()
        if sent:
            await asyncio.gather(*sent)


def key_partition(key: str, partitions: int) -> int:
    """The partition a keyed record goes to (the producer's default partitioner, as ``send_keyed`` and the
    pods' producer use), and so the changelog partition of the table value it produces."""
    all_partitions = list(range(partitions))
    return DefaultPartitioner()(key.encode(), all_partitions, all_partitions)


async def send_keyed(app: faust.App, topic: str, records: list[tuple[bytes, bytes]]) -> list[asyncio.Future]:
    """Produce keyed records now, partitioned by key as ``Topic.send`` would (the producer's partitioner).

    Straight to the aiokafka producer (``streams.kafka.internals.aiokafka_producer``), not through Faust's
    per-record plumbing; the futures resolve when Kafka has each record."""
    producer = aiokafka_producer(app)
    return [await producer.send(topic, value=value, key=key) for key, value in records]


class PartitionView(MutableMapping[str, Any]):
    """A table seen as a mapping whose writes go to one changelog partition (through ``writes``)."""

    def __init__(self, writes: TableWrites, table: faust.Table, partition: int) -> None:
        self.writes = writes
        self.table = table
        self.partition = partition

    def __getitem__(self, key: str) -> Any:
        return self.table.data[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.writes.put(self.table, self.partition, key, value)

    def __delitem__(self, key: str) -> None:
        if key not in self.table.data:
            raise KeyError(key)
        self.writes.delete(self.table, self.partition, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.table.data)

    def __len__(self) -> int:
        return len(self.table.data)
