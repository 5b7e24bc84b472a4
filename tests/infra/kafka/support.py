"""One Kafka broker per test session, shared by every directory that needs it.

Each conftest that needs Kafka declares a session fixture returning ``session_broker()``;
the broker starts on first use and stops at interpreter exit (and with the test run, if it
is killed: the JVM gets SIGTERM when its parent dies). It fails, never skips, when it cannot
start: Kafka is part of the CI contract.
"""

from __future__ import annotations

import atexit

from infra.kafka.broker import KafkaBroker
from streams.kafka.clients import partitions_of, stop_consumer

_broker: KafkaBroker | None = None


def session_broker() -> KafkaBroker:
    global _broker
    if _broker is None:
        broker = KafkaBroker()
        atexit.register(broker.cleanup)
        broker.start()
        _broker = broker
    elif not _broker.running:  # a fault test stopped it and failed before restarting it
        _broker.start()
    return _broker


async def read_records(bootstrap: str, topic: str) -> list[tuple[int, int, str, bytes | None, bytes]]:
    """Every record of every partition of ``topic``: (partition, offset, fb-id header or "", key, value).

    Events carry an ``fb-id`` header; the worker's batches of scope entries and rollup rows do not."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        await consumer.start()
        tps = [TopicPartition(topic, p) for p in await partitions_of(consumer, topic)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out = []
        while any([await consumer.position(tp) < ends[tp] for tp in tps]):
            for tp, records in (await consumer.getmany(timeout_ms=1000)).items():
                out += [(tp.partition, r.offset, dict(r.headers).get("fb-id", b"").decode(), r.key, r.value) for r in records]
        return sorted(out)
    finally:
        await stop_consumer(consumer)
