"""Distributed mode's alert feed: the request, scope-entry and config topics, read from their ends at start.

Run by ``farebox archiver`` (one per cluster), so every alert is raised by one
process. It assigns every partition of the topics itself (no consumer group,
no commits: like the embedded feed, history before the start is not
re-alerted) and hands each decoded event to ``on_event``. A record that does
not decode is skipped with a warning: alerts never stop the feed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from ledger.codec import decode
from ledger.events import Event

log = logging.getLogger("farebox.notify")


async def follow_topics(bootstrap: str, topics: Iterable[str], on_event: Callable[[Event], None],
                        started: asyncio.Event | None = None, skip_key: bytes | None = None) -> None:
    """Until cancelled: every event appended to ``topics`` after the start, in each partition's order; records
    keyed ``skip_key`` and tombstones are not events (the config topic's snapshots) and are passed over."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from streams.kafka.clients import partitions_of, stop_consumer, stop_if_cancelled

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                isolation_level="read_committed", client_id="farebox-notifier")
    try:
        await consumer.start()
        tps = [TopicPartition(topic, p) for topic in topics for p in await partitions_of(consumer, topic)]
        consumer.assign(tps)
        await consumer.seek_to_end(*tps)
        for tp in tps:  # resolve the end offsets now: what is appended from here on is what we see
            await consumer.position(tp)
        if started is not None:
            started.set()
        while True:
            batches = await consumer.getmany(timeout_ms=500)
            stop_if_cancelled()  # a cancel aiokafka swallowed (streams.kafka.clients.stop_if_cancelled)
            for records in batches.values():
                for record in records:
                    if record.value is None or (skip_key is not None and record.key == skip_key):
                        continue
                    try:
                        event = decode(record.value)
                    except Exception:  # noqa: BLE001 - a record the codec refuses is the dead-letter topic's matter
                        log.warning("alert feed: skipped an undecodable record at %s[%d]@%d", record.topic,
                                    record.partition, record.offset)
                        continue
                    on_event(event)
    finally:
        await stop_consumer(consumer)
