"""``streams.table_writes`` and ``streams.batching`` without a broker: codec parity and flush order.

``TableWrites`` serializes changelog records itself (orjson) instead of going
through ``Table.send_changelog``; Faust's recovery reads them with the
table's changelog codec, so the bytes must be exactly what that codec makes
(checked here against ``changelog_topic.prepare_key`` / ``prepare_value``,
for the shapes the worker stores). That recovery really reads them back is
proved end to end by ``tests/distributed/test_worker_restart.py``.
"""

from __future__ import annotations

import uuid

import faust
import pytest

from streams.table_writes import PartitionView, TableWrites, key_partition

VALUES = [
    {"s": "open", "period": "2026-11", "holds": {"team:alpha": 12_000, "key:k1": 12_000}, "leases": {"team:alpha": "l-1"},
     "team": "alpha", "key": "k1", "alias": "gpt-x", "currency": "INR", "at": "2026-11-29T10:00:00.123456+00:00",
     "ttl": 300, "ttft": [[1, 240]], "src": "2"},
    {"s": "closed", "at": "2026-11-29T10:00:00+00:00", "src": "0"},
    {"requests": 3, "tokens_in": 1200, "cost": 5_400_000, "note": "é ü ☃"},
    [None, {"requests": 1}],
]


@pytest.fixture()
def app() -> faust.App:
    return faust.App("table-writes-test", broker="kafka://127.0.0.1:1", store="memory://")


def test_records_are_the_changelog_codecs_bytes(app: faust.App) -> None:
    table = app.Table("requests", default=None, partitions=3)
    topic = table.changelog_topic
    writes = TableWrites(app)
    for i, value in enumerate(VALUES):
        writes.put(table, i % 3, f"req-{i}", value)
    writes.delete(table, 1, "req-1")
    writes.delete(table, 1, "absent")  # nothing: not in the table
    name = topic.get_topic_name()
    assert sorted(writes.records) == [(name, 0), (name, 1), (name, 2)]
    expected: dict[int, list] = {0: [], 1: [], 2: []}
    for i, value in enumerate(VALUES):
        key, _ = topic.prepare_key(f"req-{i}", table.key_serializer, None, {})
        raw, _ = topic.prepare_value(value, table.value_serializer, None, {})
        expected[i % 3].append((key, raw))
    expected[1].append((topic.prepare_key("req-1", table.key_serializer, None, {})[0], None))
    for partition, records in expected.items():
        assert writes.records[(name, partition)] == records
    assert len(writes) == 5
    assert dict(table.data) == {"req-0": VALUES[0], "req-2": VALUES[2], "req-3": VALUES[3]}


def test_partition_view_writes_to_its_partition(app: faust.App) -> None:
    table = app.Table("scope-ledger", default=None, partitions=3)
    writes = TableWrites(app)
    view = PartitionView(writes, table, 2)
    view["a"] = {"x": 1}
    assert view["a"] == {"x": 1} and len(view) == 1 and list(view) == ["a"]
    del view["a"]
    with pytest.raises(KeyError):
        del view["a"]
    name = table.changelog_topic.get_topic_name()
    assert writes.records == {(name, 2): [(b'"a"', b'{"x":1}'), (b'"a"', None)]}


async def test_key_partition_is_where_a_producer_puts_the_key(kafka_broker) -> None:
    """The worker projects only the scopes of its partitions (``streams.worker.rebalance.forget``), found by
    ``key_partition``: it must agree with where Kafka really has each scope's records."""
    from aiokafka import AIOKafkaProducer

    from infra.kafka.topics import TopicSpec, create_topics
    from tests.infra.kafka.support import read_records

    topic = f"key-partition-{uuid.uuid4().hex[:8]}"
    await create_topics(kafka_broker.bootstrap, [TopicSpec(topic, partitions=5)])
    producer = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap, enable_idempotence=True)
    await producer.start()
    keys = [f"team:t{i}" for i in range(20)] + [f"key:k{i}" for i in range(20)] + ["bu:retail", "app:é"]
    try:
        for key in keys:
            await producer.send_and_wait(topic, value=b"{}", key=key.encode())
    finally:
        await producer.stop()
    records = await read_records(kafka_broker.bootstrap, topic)
    assert len(records) == len(keys)
    assert {(key.decode(), partition) for partition, _, _, key, _ in records} == \
        {(key, key_partition(key, 5)) for key in keys}
    assert len({partition for partition, *_ in records}) > 1
