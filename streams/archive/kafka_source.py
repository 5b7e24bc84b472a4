"""Kafka -> archive: one consumer per topic, manual offsets, the flush order of ``streams.archive.write``.

A batch is what arrived in ``flush_interval_s`` (or ``batch_size`` records,
whichever first), so a quiet topic makes few small files; the manifest entry
of a batch lists its extent per partition, and the consumer offsets are
committed only after it (recovery: ``streams.archive.write``).

With a decode pool and a backlog (a full batch), the archiver reads the next
batch and starts decoding it while the last one's files are written: only
reading and decoding overlap; journal, files, manifest entry and commit stay
one batch at a time, in the flush order. A batch read ahead and never
committed (a stop, a crash) is read again by the next run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from streams.archive.batch import Decoder, Decoding
from streams.archive.write import ArchiveWriter, Record, extents_of


class KafkaArchiver:
    """Consumes one topic (all its partitions, manual assignment, manual commits) into the archive.

    Run one per topic (or pass ``partitions`` to split a topic between several). A ``pool``
    (``streams.archive.pool.DecodePool``) decodes each batch on more cores.
    ``between_write_and_commit`` is a test hook (a crash point).
    """

    def __init__(self, bootstrap: str, topic: str, root: str | Path, *, group_id: str = "farebox-archiver",
                 partitions: Iterable[int] | None = None, batch_size: int = 5000, flush_interval_s: float = 0.0,
                 between_write_and_commit: Callable[[], None] | None = None, pool: Decoder | None = None) -> None:
        self.bootstrap, self.topic, self.group_id = bootstrap, topic, group_id
        self.writer = ArchiveWriter(root, f"kafka-{topic}", pool)
        self._partitions = None if partitions is None else sorted(partitions)
        self._batch = batch_size
        self._interval = flush_interval_s
        self._hook = between_write_and_commit
        self.archived = 0

    async def run(self, stop: asyncio.Event | None = None, until_caught_up: bool = False) -> int:
        """Archive until ``stop`` is set (or, with ``until_caught_up``, until the end offsets); events archived."""
        from aiokafka import AIOKafkaConsumer, TopicPartition
        from aiokafka.structs import OffsetAndMetadata

        from streams.kafka.clients import partitions_of, stop_consumer

        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group_id,
                                    enable_auto_commit=False, auto_offset_reset="earliest",
                                    isolation_level="read_committed")
        try:
            await consumer.start()
            parts = self._partitions if self._partitions is not None else await partitions_of(consumer, self.topic)
            tps = [TopicPartition(self.topic, p) for p in parts]
            consumer.assign(tps)

            async def commit(extents: dict[int, tuple[int, int]]) -> None:
                await consumer.commit({TopicPartition(self.topic, p): OffsetAndMetadata(last + 1, "")
                                       for p, (_, last) in extents.items()})

            for partition, (first, last) in sorted(self.writer.pending().items()):
                tp = TopicPartition(self.topic, partition)  # recovery: exactly the journaled batch again
                consumer.seek(tp, first)
                records: list[Record] = []
                while await consumer.position(tp) <= last:
                    got = await consumer.getmany(tp, timeout_ms=1000, max_records=last - first + 1)
                    records += [Record(partition, r.offset, r.value) for r in got.get(tp, []) if r.offset <= last]
                if not self.writer.listed(partition, first, last):  # killed before its manifest entry
                    await asyncio.to_thread(self.writer.write, records)
                await commit({partition: (first, last)})
                self.archived += len(records)
            self.writer.done()
            ends = await consumer.end_offsets(tps) if until_caught_up else {}

            async def caught_up() -> bool:
                return until_caught_up and all([await consumer.position(tp) >= ends[tp] for tp in tps])

            def stopped() -> bool:
                return stop is not None and stop.is_set()

            async def next_batch() -> tuple[list[Record], Decoding | None]:
                """The next batch's records, and their decoding started in the pool (while the last is written)."""
                records: list[Record] = []
                started = time.monotonic()
                while len(records) < self._batch and not stopped():
                    got = await consumer.getmany(*tps, timeout_ms=200, max_records=self._batch - len(records))
                    records += [Record(tp.partition, r.offset, r.value) for tp, rs in got.items() for r in rs]
                    if time.monotonic() - started >= self._interval or await caught_up():
                        break
                return records, self.writer.decode(records)

            ahead: asyncio.Task[tuple[list[Record], Decoding | None]] | None = None
            try:
                while not stopped() and (ahead is not None or not await caught_up()):
                    records, decoded = await (ahead if ahead is not None else next_batch())
                    ahead = None
                    if not records:
                        continue
                    extents = extents_of(records)
                    self.writer.journal(extents)
                    written = asyncio.ensure_future(asyncio.to_thread(self.writer.write, records, decoded=decoded))
                    if self.writer.pool is not None and len(records) == self._batch:  # a backlog: read on
                        ahead = asyncio.create_task(next_batch())
                    await written
                    if self._hook is not None:
                        self._hook()
                    await commit(extents)
                    self.writer.done()
                    self.archived += len(records)
            finally:
                if ahead is not None:  # read but neither written nor committed: the next run reads it again
                    ahead.cancel()
                    await asyncio.gather(ahead, return_exceptions=True)
            return self.archived
        finally:
            await stop_consumer(consumer)


async def archiver_lag(bootstrap: str, topic: str, group_id: str) -> int:
    """Records of ``topic`` the archiver's consumer group has not committed yet (end offsets minus committed
    offsets, every partition): what a replay from the archive cannot see."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from streams.kafka.clients import partitions_of, stop_consumer

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id, enable_auto_commit=False)
    try:
        await consumer.start()
        tps = [TopicPartition(topic, p) for p in await partitions_of(consumer, topic)]
        consumer.assign(tps)  # manual assignment: no group join, so a running archiver is not disturbed
        ends = await consumer.end_offsets(tps)
        lag = 0
        for tp in tps:
            lag += max(ends[tp] - (await consumer.committed(tp) or 0), 0)
        return lag
    finally:
        await stop_consumer(consumer)
