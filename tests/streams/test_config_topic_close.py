"""The config topic's feed and publisher close promptly with Kafka unreachable, whatever aiokafka does with the cancel.

No broker: both point at a port nothing listens on, so each keeps failing and
retrying every 0.1 s, and ``close`` comes at a different moment of that cycle
each round. aiokafka sometimes turns the cancellation of a connect into an
ordinary error; a retry loop that took it for Kafka being away would go on
retrying, and ``close`` would wait for it forever.
"""

from __future__ import annotations

import asyncio

from infra.process import free_port
from streams.config_topic import KafkaSnapshotFeed, KafkaSnapshotPublisher

ROUNDS = 20


async def test_feed_and_publisher_close_within_seconds_while_kafka_is_unreachable() -> None:
    for i in range(ROUNDS):
        nowhere = f"127.0.0.1:{free_port()}"
        feed = KafkaSnapshotFeed(nowhere, "fb.config", lambda d: "", retry_s=0.1)
        publisher = KafkaSnapshotPublisher(nowhere, "fb.config", lambda d: "", retry_s=0.1, send_timeout_s=0.5)
        feed.start()
        publisher.publish(1, {"round": i})
        await asyncio.sleep(0.1 + (i % 10) * 0.07)  # close lands in a different phase of the retry cycle
        started = asyncio.get_running_loop().time()
        await asyncio.wait_for(publisher.close(timeout_s=0.1), 10)
        await asyncio.wait_for(feed.close(), 10)
        took = asyncio.get_running_loop().time() - started
        assert took < 6.0, f"round {i}: closing took {took:.1f}s"
        assert publisher.sent_version == 0 and feed.head() is None  # nothing reached or came from Kafka
