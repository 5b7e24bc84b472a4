"""The config-topic adapters against the real Kafka broker: the newest snapshot wins, commits never wait."""

from __future__ import annotations

import asyncio
import time
import uuid

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from infra.kafka.topics import create_topics, farebox_topics
from proxy.control.document import content_hash
from streams.config_topic import SNAPSHOT_KEY, KafkaSnapshotFeed, KafkaSnapshotPublisher, encode_snapshot
from streams.kafka.clients import ID_HEADER
from tests.infra.kafka.support import read_records


def _doc(n: int) -> dict:
    return {"control": {"teams": [{"name": f"team-{n}"}]}, "prices": [], "keys": [], "admin_tokens": []}


async def _config_topic(bootstrap: str) -> str:
    prefix = f"cfg{uuid.uuid4().hex[:8]}."
    await create_topics(bootstrap, [s for s in farebox_topics(1, prefix=prefix) if s.name.endswith("config")])
    return f"{prefix}config"


async def _until(predicate, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not reached in {timeout_s}s"
        await asyncio.sleep(0.05)


async def test_the_config_topic_is_compacted_and_takes_large_snapshots(kafka_broker):
    topic = await _config_topic(kafka_broker.bootstrap)
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    await admin.start()
    try:
        described = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    finally:
        await admin.close()
    [(_, _, _, _, rows)] = described[0].resources
    entries = {name: value for name, value, *_ in rows}
    assert entries["cleanup.policy"] == "compact"
    assert int(entries["max.message.bytes"]) >= 16 * 1024 * 1024


async def test_a_fresh_feed_sees_the_newest_snapshot_and_skips_other_records(kafka_broker):
    topic = await _config_topic(kafka_broker.bootstrap)
    publisher = KafkaSnapshotPublisher(kafka_broker.bootstrap, topic, content_hash, retry_s=0.2)
    for version in range(1, 6):
        publisher.publish(version, _doc(version))
        assert await publisher.flush(30), f"snapshot {version} not acknowledged"
    publisher.publish(3, _doc(3))  # older than what was sent: ignored, never written over the newer one
    await publisher.close()
    assert publisher.sent_version == 5 and publisher.failures == 0

    # other writers: an older snapshot (two committers racing), an audit event, a damaged record
    raw = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    await raw.start()
    try:
        await raw.send_and_wait(topic, encode_snapshot(4, content_hash(_doc(4)), _doc(4)), key=SNAPSHOT_KEY,
                                headers=[(ID_HEADER, b"snapshot/4")])
        await raw.send_and_wait(topic, b'{"type": "config.published"}', key=b"config/5",
                                headers=[(ID_HEADER, b"config/5")])
        await raw.send_and_wait(topic, encode_snapshot(9, "not-the-hash", _doc(9)), key=SNAPSHOT_KEY,
                                headers=[(ID_HEADER, b"snapshot/9")])
    finally:
        await raw.stop()

    records = await read_records(kafka_broker.bootstrap, topic)
    assert [r[2] for r in records if r[3] == SNAPSHOT_KEY] == [f"snapshot/{v}" for v in (1, 2, 3, 4, 5, 4, 9)]

    feed = KafkaSnapshotFeed(kafka_broker.bootstrap, topic, content_hash)
    feed.start()
    try:
        await _until(lambda: feed.records == 6, 30, "the feed read every valid snapshot record")
        assert feed.head() == (5, content_hash(_doc(5)))
        assert feed.document(5) == _doc(5)
        try:
            feed.document(4)
            raise AssertionError("an old version must not be served")
        except LookupError:
            pass
    finally:
        await feed.close()


async def test_a_running_feed_follows_new_snapshots(kafka_broker):
    topic = await _config_topic(kafka_broker.bootstrap)
    feed = KafkaSnapshotFeed(kafka_broker.bootstrap, topic, content_hash)
    feed.start()
    publisher = KafkaSnapshotPublisher(kafka_broker.bootstrap, topic, content_hash)
    try:
        assert feed.head() is None
        publisher.publish(7, _doc(7))
        await _until(lambda: feed.head() == (7, content_hash(_doc(7))), 30, "snapshot 7 on the feed")
        publisher.publish(8, _doc(8))
        publisher.publish(9, _doc(9))  # supersedes 8 if 8 is not sent yet
        await _until(lambda: (feed.head() or (0,))[0] == 9, 30, "snapshot 9 on the feed")
        assert feed.document(9) == _doc(9)
    finally:
        await publisher.close()
        await feed.close()


async def test_publishing_with_kafka_unreachable_returns_at_once_and_retries(kafka_broker):
    from infra.process import free_port

    nowhere = f"127.0.0.1:{free_port()}"
    publisher = KafkaSnapshotPublisher(nowhere, "fb.config", content_hash, retry_s=0.1, send_timeout_s=1.0)
    publisher.publish(1, _doc(1))  # a plain call: queues and returns (the commit goes on)
    await _until(lambda: publisher.failures >= 2, 60, "two failed attempts")
    assert publisher.sent_version == 0
    assert await publisher.flush(0.1) is False
    await publisher.close(timeout_s=0.1)
