"""Kafka event log against a real broker: outages spool and replay, a killed producer's spool replays.

The contract suite (test_eventlog_contract.py) covers the port; these cover what only
Kafka has: the broker going away under load, and a producer killed with a full spool.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path

import pytest
from stream_events import make_event

from infra.kafka.topics import TopicSpec, create_topics
from infra.process import free_port
from ledger.codec import decode
from streams.kafka.log import SPOOLED, KafkaEventLog
from tests.infra.kafka.support import read_records

HERE = Path(__file__).parent
ROOT = HERE.parents[1]


async def _topic(bootstrap: str, partitions: int = 3) -> str:
    name = f"fault-{uuid.uuid4().hex[:10]}"
    await create_topics(bootstrap, [TopicSpec(name, partitions)])
    return name


def _open(bootstrap: str, topic: str, spool: Path, spool_after_s: float = 0.5) -> KafkaEventLog:
    return KafkaEventLog(bootstrap, spool, requests_topic=topic, scope_topic=topic, config_topic=topic,
                         spool_after_s=spool_after_s, reconnect_backoff_s=0.2)


async def _until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def _assert_exactly_once_in_key_order(records, appended_ids: list[str]) -> None:
    """Every id once; within each key (partition order) ids follow append order."""
    ids = [event_id for _, _, event_id, _, _ in records]
    doubled = {i for i in ids if ids.count(i) > 1} if len(ids) != len(set(ids)) else set()
    assert not doubled, f"{len(doubled)} ids doubled in Kafka, e.g. {sorted(doubled)[:5]}"
    assert set(ids) == set(appended_ids), f"missing: {sorted(set(appended_ids) - set(ids))[:5]}"
    rank = {event_id: n for n, event_id in enumerate(appended_ids)}
    by_key: dict[bytes | None, list[int]] = defaultdict(list)
    for _, _, event_id, key, _ in records:  # sorted by (partition, offset)
        by_key[key].append(rank[event_id])
    for key, ranks in by_key.items():
        assert ranks == sorted(ranks), f"key {key!r} out of append order"


async def test_broker_outage_is_spooled_and_replayed_in_key_order(kafka_broker, tmp_path):
    topic = await _topic(kafka_broker.bootstrap)
    log = _open(kafka_broker.bootstrap, topic, tmp_path / "spool")
    appended: list[str] = []
    ack_delay: dict[str, float] = {}
    stop = asyncio.Event()

    def on_ack(future: asyncio.Future, event_id: str, at: float) -> None:
        ack_delay[event_id] = time.monotonic() - at

    async def traffic() -> None:  # ~2,000 events/s from one task, never awaiting an append
        i = 0
        while not stop.is_set():
            for _ in range(10):
                event = make_event(i, team=f"t{i % 5}")
                log.append(event).add_done_callback(lambda f, e=event.id, t=time.monotonic(): on_ack(f, e, t))
                appended.append(event.id)
                i += 1
            await asyncio.sleep(0.005)

    task = asyncio.create_task(traffic())
    try:
        await _until(lambda: log.mode == "direct" and len(ack_delay) > 200, 10, "direct sends")
        await asyncio.to_thread(kafka_broker.stop)
        await _until(lambda: log.mode == "spool", 5, "fail-over to the spool")
        outage_started = len(appended)
        await asyncio.sleep(1.5)
        outage_ids = appended[outage_started:]
        # appends made while Kafka is down are acknowledged (from the spool) within a few ms
        slow = sorted((round(ack_delay.get(e, 99), 3), n) for n, e in enumerate(outage_ids[:-50]))[-5:]
        assert outage_ids and all(ack_delay.get(e, 99) < 0.5 for e in outage_ids[:-50]), (slow, len(outage_ids))
        await asyncio.to_thread(kafka_broker.start)
        await _until(lambda: log.mode == "direct", 30, "spool replayed")
        await asyncio.sleep(0.3)
    finally:
        stop.set()
        await task
        if not kafka_broker.running:
            await asyncio.to_thread(kafka_broker.start)
    await log.close()
    assert log.spooled_bytes == 0
    assert len(ack_delay) == len(appended)  # everything acknowledged
    # nobody waited longer than the fail-over threshold plus slack, Kafka down or not
    assert max(ack_delay.values()) < 0.5 + 1.0
    records = await read_records(kafka_broker.bootstrap, topic)
    _assert_exactly_once_in_key_order(records, appended)
    assert all(decode(value).id == event_id for _, _, event_id, _, value in records[:50])


async def test_killed_producer_spool_is_replayed_on_restart(kafka_broker, tmp_path):
    topic = await _topic(kafka_broker.bootstrap)
    spool = tmp_path / "spool"
    dead = f"127.0.0.1:{free_port()}"  # nothing listens: Kafka is unreachable for the writer
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)])}
    acked: list[str] = []
    with open(tmp_path / "writer.err", "w") as err, subprocess.Popen(
        [sys.executable, str(HERE / "kafka_spool_writer.py"), dead, topic, str(spool)],
        stdout=subprocess.PIPE, stderr=err, text=True, env=env, cwd=ROOT,
    ) as writer:
        try:
            assert writer.stdout is not None
            for line in writer.stdout:
                event_id, offset = line.split()
                assert int(offset) == SPOOLED
                acked.append(event_id)
                if len(acked) >= 3000:
                    break
        finally:
            writer.send_signal(signal.SIGKILL)  # mid-stream: appends in flight, spool writes unfinished
            writer.wait()
    assert len(acked) >= 3000, (tmp_path / "writer.err").read_text()[-2000:]
    log = _open(kafka_broker.bootstrap, topic, spool)
    await _until(lambda: log.mode == "direct", 20, "spool replayed on restart")
    await log.close()
    records = await read_records(kafka_broker.bootstrap, topic)
    ids = [event_id for _, _, event_id, _, _ in records]
    assert len(ids) == len(set(ids)), "an id was replayed twice"
    assert set(acked) <= set(ids), "an acknowledged event was lost"
    # what the spool held beyond the acks (fsynced, ack not yet printed) is a prefix of the stream, in order
    order = [f"{make_event(i).id}" for i in range(len(ids))]
    assert sorted(ids, key=order.index) == order[: len(ids)]
    _assert_exactly_once_in_key_order(records, order[: len(ids)])


async def test_replay_restart_skips_what_kafka_already_has(kafka_broker, tmp_path):
    """A spool replayed once (then the process died before truncating) is not written twice."""
    topic = await _topic(kafka_broker.bootstrap, partitions=1)
    spool = tmp_path / "spool"
    first = _open(f"127.0.0.1:{free_port()}", topic, spool)  # unreachable: everything spools
    events = [make_event(i) for i in range(300)]
    assert await asyncio.gather(*(first.append(e) for e in events)) == [SPOOLED] * 300
    await first.close()
    spooled = spool.read_bytes()
    second = _open(kafka_broker.bootstrap, topic, spool)
    await _until(lambda: second.mode == "direct", 20, "first replay")
    await second.close()
    spool.write_bytes(spooled)  # as if the replaying process had died before truncating the spool
    third = _open(kafka_broker.bootstrap, topic, spool)
    await _until(lambda: third.mode == "direct", 20, "second replay")
    assert await third.append(events[5]) == 6  # and a re-append resolves with the stored offset
    await third.close()
    records = await read_records(kafka_broker.bootstrap, topic)
    assert [event_id for _, _, event_id, _, _ in records] == [e.id for e in events]


async def test_read_refuses_a_multi_partition_view(kafka_broker, tmp_path):
    topic = await _topic(kafka_broker.bootstrap, partitions=3)
    log = _open(kafka_broker.bootstrap, topic, tmp_path / "spool", spool_after_s=5.0)
    try:
        events = [make_event(i, team=f"t{i % 7}") for i in range(60)]
        offsets = await asyncio.gather(*(log.append(e) for e in events))
        assert all(o >= 1 for o in offsets)
        with pytest.raises(Exception, match="one-partition"):
            await log.read()
        got = []
        for p in range(3):
            got += [e for _, e in await log.read_partition(topic, p, limit=1000)]
        assert sorted(e.id for e in got) == sorted(e.id for e in events)
    finally:
        await log.close()
