"""The local KRaft broker from the Maven jars: ready, topics as specified, data kept across restarts."""

from __future__ import annotations

import uuid

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from infra.kafka.broker import KAFKA_VERSION, cache_dir
from infra.kafka.topics import create_topics, farebox_topics
from tests.infra.kafka.support import read_records


async def _configs(bootstrap: str, topic: str) -> dict[str, str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [response] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        [(_, _, _, _, entries)] = response.resources
        return {name: value for name, value, *_ in entries}
    finally:
        await admin.close()


async def test_broker_runs_kafka_4_from_the_cached_jars(kafka_broker):
    assert KAFKA_VERSION.startswith("4.")
    assert (cache_dir() / "lib" / f"kafka_2.13-{KAFKA_VERSION}.jar").exists()
    assert kafka_broker.running and kafka_broker.ready_after_s is not None


async def test_farebox_topics_have_partitions_retention_and_compaction(kafka_broker):
    prefix = f"t{uuid.uuid4().hex[:6]}."
    specs = farebox_topics(partitions=4, retention_ms=3_600_000, prefix=prefix)
    assert sorted(await create_topics(kafka_broker.bootstrap, specs)) == sorted(s.name for s in specs)
    assert await create_topics(kafka_broker.bootstrap, specs) == []  # idempotent
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    await admin.start()
    try:
        described = {t["topic"]: len(t["partitions"]) for t in await admin.describe_topics([s.name for s in specs])}
    finally:
        await admin.close()
    assert described == {f"{prefix}requests": 4, f"{prefix}scope-entries": 4, f"{prefix}rollups": 4,
                         f"{prefix}config": 1, f"{prefix}dead-letter": 1}
    requests = await _configs(kafka_broker.bootstrap, f"{prefix}requests")
    assert (requests["retention.ms"], requests["cleanup.policy"]) == ("3600000", "delete")
    assert (await _configs(kafka_broker.bootstrap, f"{prefix}config"))["cleanup.policy"] == "compact"


async def test_a_restart_keeps_acknowledged_records(kafka_broker):
    topic = f"restart-{uuid.uuid4().hex[:6]}"
    await create_topics(kafka_broker.bootstrap, farebox_topics(1, prefix=f"{topic}.")[:1])
    producer = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        for i in range(20):
            await producer.send_and_wait(f"{topic}.requests", b"{}", b"k", headers=[("fb-id", f"e{i}".encode())])
    finally:
        await producer.stop()
    kafka_broker.stop()
    kafka_broker.start()
    records = await read_records(kafka_broker.bootstrap, f"{topic}.requests")
    assert [r[2] for r in records] == [f"e{i}" for i in range(20)]


def test_cluster_ids_never_look_like_options() -> None:
    from infra.kafka.broker import new_cluster_id

    ids = [new_cluster_id() for _ in range(2000)]  # ~31 would start with '-' without the redraw
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
