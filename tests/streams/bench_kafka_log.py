"""Benchmark (run by hand, never a timed assertion): KafkaEventLog appends/s from one asyncio task.

    .venv/bin/python tests/streams/bench_kafka_log.py [N]

Starts its own broker (jars from Maven Central), then one task appends N events
(acks=all, idempotent, linger 5 ms) without awaiting each, the request-path
pattern, and awaits the last; then the same with Kafka down (spool only), and
the replay rate when Kafka comes back. Prints raw Kafka producer throughput for
comparison, measured in the same process.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path

from aiokafka import AIOKafkaProducer
from stream_events import make_event

from infra.kafka.broker import KafkaBroker
from infra.kafka.topics import TopicSpec, create_topics
from infra.process import free_port
from ledger.codec import encode
from streams.kafka.log import KafkaEventLog


async def _topic(bootstrap: str, partitions: int) -> str:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    await create_topics(bootstrap, [TopicSpec(name, partitions)])
    return name


def _log(bootstrap: str, topic: str, spool: Path) -> KafkaEventLog:
    return KafkaEventLog(bootstrap, spool, requests_topic=topic, scope_topic=topic, config_topic=topic)


async def direct(bootstrap: str, n: int, partitions: int, spool: Path, per_tick: int) -> float:
    topic = await _topic(bootstrap, partitions)
    log = _log(bootstrap, topic, spool)
    while log.mode != "direct":
        await asyncio.sleep(0.01)
    events = [make_event(i, team=f"t{i % 16}") for i in range(n)]
    start = time.perf_counter()
    last = None
    for i in range(0, n, per_tick):
        for event in events[i : i + per_tick]:
            last = log.append(event)
        await asyncio.sleep(0)
    await last  # type: ignore[misc]
    await log.flush()
    elapsed = time.perf_counter() - start
    await log.close()
    return n / elapsed


async def raw_producer(bootstrap: str, n: int, partitions: int) -> float:
    topic = await _topic(bootstrap, partitions)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=5,
                                max_batch_size=256 * 1024)
    await producer.start()
    payloads = [(f"t{i % 16}".encode(), encode(make_event(i))) for i in range(n)]
    start = time.perf_counter()
    last = None
    for key, value in payloads:
        last = await producer.send(topic, value, key)
    await last
    elapsed = time.perf_counter() - start
    await producer.stop()
    return n / elapsed


async def spool_then_replay(bootstrap: str, n: int, spool: Path) -> tuple[float, float]:
    topic = await _topic(bootstrap, 3)
    down = KafkaEventLog(f"127.0.0.1:{free_port()}", spool, requests_topic=topic, scope_topic=topic,
                         config_topic=topic)
    events = [make_event(i, team=f"t{i % 16}") for i in range(n)]
    start = time.perf_counter()
    futures = [down.append(e) for e in events]
    await asyncio.gather(*futures)
    spooled = n / (time.perf_counter() - start)
    await down.close()
    start = time.perf_counter()
    up = _log(bootstrap, topic, spool)
    while up.mode != "direct":
        await asyncio.sleep(0.005)
    replayed = n / (time.perf_counter() - start)
    await up.close()
    return spooled, replayed


async def main(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp, KafkaBroker() as broker:
        root = Path(tmp)
        print(f"broker ready {broker.ready_after_s:.2f}s after the JVM started (format not included)")
        print(f"raw aiokafka producer, 3 partitions:        {await raw_producer(broker.bootstrap, n, 3):>9,.0f} events/s")
        for partitions in (1, 3):
            rate = await direct(broker.bootstrap, n, partitions, root / f"s{partitions}", per_tick=100)
            print(f"KafkaEventLog, {partitions} partition(s), 100/loop turn: {rate:>9,.0f} events/s acked")
        spooled, replayed = await spool_then_replay(broker.bootstrap, n, root / "spool")
        print(f"Kafka down, spool only:                      {spooled:>9,.0f} events/s fsynced")
        print(f"spool replay when Kafka returns:             {replayed:>9,.0f} events/s")


if __name__ == "__main__":
    import logging

    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 50_000))
