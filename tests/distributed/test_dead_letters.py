"""Distributed mode: records the worker cannot read go to the dead-letter topic; the ledger goes on.

Malformed records land on each of the worker's topics between two bursts of
traffic (what a newer pod's event type, a corrupted write or a bug would
leave). Before dead letters the first one stopped the worker, and every
restart stopped on it again. Now the same worker process goes on: the
projection equals the sums over the readable events, each malformed record is
in the dead-letter topic exactly once, unchanged, with where it came from and
why, and ``farebox replay`` agrees with live and counts what it skipped.
"""

from __future__ import annotations

import asyncio

import orjson
import pytest
import redis
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from infra.redis.server import RedisServer
from ledger.rollups import COUNTERS
from streams.dead_letters import read_headers
from tests.distributed.cluster import running_cluster
from tests.distributed.test_faults import FAST_SIM, _closed_exactly_once, _fire, _replay, _wait_ledger_matches
from tests.infra.kafka.support import session_broker

pytestmark = pytest.mark.e2e


def _poison(prefix: str) -> list[tuple[str, bytes, bytes]]:
    """(topic, key, value): one malformed record per reading path of the worker."""
    row = ["admit", "e1", "r1", "2026-11", 5, 0, None, 0, "0"]  # 9 fields: a row has 10
    return [
        (f"{prefix}requests", b"alpha", b"not json"),
        (f"{prefix}requests", b"beta", b'{"type": "request.admitted", "schema": 99, "id": "x"}'),  # a newer pod's
        (f"{prefix}scope-entries", b"team:alpha",
         orjson.dumps({"type": "scope.entries", "scope": "team:alpha", "rows": [row]})),
        (f"{prefix}rollups", b"alpha|k|chat|d|2026-11-29T10:00", b'{"source": "0", "rows": [[7, [1.5]]]}'),
    ]


async def _produce(bootstrap: str, records: list[tuple[str, bytes, bytes]]) -> list[tuple[str, int, int]]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        out = []
        for topic, key, value in records:
            meta = await producer.send_and_wait(topic, value, key=key)
            out.append((topic, meta.partition, meta.offset))
        return out
    finally:
        await producer.stop()


async def _dead_letters(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes, object]]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        out = []
        while await consumer.position(tp) < end:
            for record in (await consumer.getmany(tp, timeout_ms=1000)).get(tp, []):
                out.append((record.key, record.value, read_headers(record.headers)))
        return out
    finally:
        await consumer.stop()


def test_unreadable_records_are_dead_lettered_and_the_ledger_goes_on(tmp_path_factory):
    server = RedisServer().start()
    try:
        with running_cluster(tmp_path_factory.mktemp("dead"), session_broker().bootstrap, server.url,
                             sim_defaults=FAST_SIM) as cluster:
            rc = redis.Redis.from_url(cluster.redis_url)
            worker_pid = cluster.worker.pid
            _fire(cluster, 30)
            poison = _poison(cluster.prefix)
            where = asyncio.run(_produce(cluster.bootstrap, poison))
            _fire(cluster, 30)
            events, rows = _wait_ledger_matches(cluster, rc, timeout=60)
            _closed_exactly_once(events)
            assert cluster.worker.poll() is None and cluster.worker.pid == worker_pid  # never stopped

            letters = asyncio.run(_dead_letters(cluster.bootstrap, f"{cluster.prefix}dead-letter"))
            # by origin (the agents of different topics run side by side: their dead letters interleave)
            got = {(o.topic, o.partition, o.offset): (key, value) for key, value, o in letters}
            assert len(letters) == len(got) == 4
            assert got == {origin: (key, value) for origin, (_, key, value) in zip(where, poison)}
            by_origin = {(o.topic, o.partition, o.offset): o.reason for *_, o in letters}
            reasons = [by_origin[origin] for origin in where]
            assert reasons[0].startswith("CodecError: event is not valid JSON")
            assert "cannot read event type 'request.admitted' schema 99" in reasons[1]
            assert reasons[2].startswith("ValueError: not enough values to unpack")
            assert reasons[3] == f"ValueError: a rollup row has 1 counters, expected {len(COUNTERS)}"
            report = _replay(cluster)
            assert "2 unreadable record(s) skipped" in report, report
            log = (cluster.folder / "worker.log").read_text()
            assert log.count("unreadable record at") == 4
            print(f"\n{len(letters)} dead letters; ledger {({t: r['settled'] for t, r in rows.items()})}; {report}")
    finally:
        server.cleanup()
