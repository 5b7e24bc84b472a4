"""``streams.kafka.internals.LivePartitions``: aiokafka drains only what Faust has active, even when that is nothing.

Against a real broker and aiokafka's own fetcher: records of two partitions
are buffered, then Faust's active set becomes empty (a rebalance pauses
everything). Given the bare set, aiokafka drains every partition (the trap
that would stall a table recovery); given the view, it drains nothing and
the records stay buffered until their partition is active again. The first
test pins aiokafka's behaviour: if an upgrade changes it, the view can go.
"""

from __future__ import annotations

import uuid

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from infra.kafka.topics import TopicSpec, create_topics
from streams.kafka.internals import LivePartitions, fetch_only_active

RECORDS = 5


async def _buffered_consumer(bootstrap: str) -> tuple[AIOKafkaConsumer, list[TopicPartition]]:
    """A consumer assigned two partitions of a fresh topic with ``RECORDS`` records each, fetched and buffered."""
    topic = f"live-{uuid.uuid4().hex[:10]}"
    await create_topics(bootstrap, [TopicSpec(topic, partitions=2)])
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for partition in (0, 1):
            for i in range(RECORDS):
                await producer.send_and_wait(topic, f"{partition}-{i}".encode(), partition=partition)
    finally:
        await producer.stop()
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    consumer.assign(tps)
    fetcher = consumer._fetcher
    for _ in range(50):  # until both partitions' records are in the fetcher's buffer
        if all(tp in fetcher._records for tp in tps):
            break
        await fetcher.fetched_records({TopicPartition(topic, 99)}, timeout=0.1)  # drains nothing, waits a fetch
    assert all(tp in fetcher._records for tp in tps)
    return consumer, tps


async def test_aiokafka_drains_every_partition_when_given_an_empty_set(kafka_broker) -> None:
    consumer, tps = await _buffered_consumer(kafka_broker.bootstrap)
    try:
        active: set = set()  # Faust's set, emptied by a rebalance while the fetch waits
        drained = await consumer._fetcher.fetched_records(active, timeout=0)
        assert sorted(drained) == tps and all(len(records) == RECORDS for records in drained.values())
        assert [await consumer.position(tp) for tp in tps] == [RECORDS, RECORDS]  # gone from the consumer's view
    finally:
        await consumer.stop()


async def test_the_live_view_drains_only_active_partitions(kafka_broker) -> None:
    consumer, tps = await _buffered_consumer(kafka_broker.bootstrap)
    try:
        active: set = set()
        view = LivePartitions(active)
        assert await consumer._fetcher.fetched_records(view, timeout=0.2) == {}
        assert [await consumer.position(tp) for tp in tps] == [0, 0]
        active.add(tps[1])  # resumed: membership follows the live set
        drained = await consumer._fetcher.fetched_records(view, timeout=0)
        assert list(drained) == [tps[1]] and len(drained[tps[1]]) == RECORDS
        assert [await consumer.position(tp) for tp in tps] == [0, RECORDS]
    finally:
        await consumer.stop()


async def test_the_worker_consumer_fetches_through_the_view() -> None:
    """Faust's consumer thread hands aiokafka the view (the patch is applied once, however often asked)."""
    from contextlib import nullcontext
    from types import SimpleNamespace

    from faust.transport.drivers import aiokafka as driver

    fetch_only_active()
    fetch_only_active()
    seen: list = []

    async def fetched_records(partitions, timeout=0, max_records=None):  # type: ignore[no-untyped-def]
        seen.append((partitions, bool(partitions)))
        return {}

    fetcher = SimpleNamespace(_closed=False, fetched_records=fetched_records,
                              _subscriptions=SimpleNamespace(fetch_context=nullcontext))
    thread = SimpleNamespace(consumer=SimpleNamespace(flow_active=True))
    active: set = set()
    await driver.AIOKafkaConsumerThread._fetch_records(thread, SimpleNamespace(_closed=False, _fetcher=fetcher),
                                                       active, timeout=0.1, max_records=10)
    [(view, truthy)] = seen
    assert isinstance(view, LivePartitions) and view.tps is active and truthy
