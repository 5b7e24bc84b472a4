"""aiokafka glue the Kafka event log, the archiver and replay share: partitions, reads by offset, recent ids,
clean stops.

Public API only; where aiokafka has none (a metadata call on a consumer without
a subscription, an "abort" for a producer, a consumer stop that can skip its
cleanup) the private reach is in ``streams.kafka.internals``.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from streams.kafka.internals import close_consumer_parts, cluster_metadata, drop_producer_sender

log = logging.getLogger(__name__)

ID_HEADER = "fb-id"  # every record carries its event id here, so consumers dedupe without parsing


async def partitions_of(consumer: AIOKafkaConsumer, topic: str) -> list[int]:
    """The topic's partitions, asked of the cluster (a consumer with no subscription knows none)."""
    cluster = await cluster_metadata(consumer)
    return sorted(cluster.partitions_for_topic(topic) or ())


async def read_range(consumer: AIOKafkaConsumer, tp: TopicPartition, after: int,
                     limit: int) -> list[tuple[int, bytes]]:
    """(Kafka offset + 1, value) of the records with offset + 1 > ``after``, at most ``limit``, up to
    the end offset at the time of the call. Adds ``tp`` to the consumer's manual assignment."""
    if tp not in consumer.assignment():
        consumer.assign([*consumer.assignment(), tp])
    end = (await consumer.end_offsets([tp]))[tp]
    stop = min(end, after + limit)
    out: list[tuple[int, bytes]] = []
    if stop <= after:
        return out
    consumer.seek(tp, after)
    while await consumer.position(tp) < stop:  # gaps (compaction, markers) move the position too
        batch = await consumer.getmany(tp, timeout_ms=1000, max_records=stop - after)
        out += [(r.offset + 1, r.value) for r in batch.get(tp, []) if r.offset < stop]
    return out


async def recent_ids(bootstrap: str, topics: list[str], window: int, *,
                     client_id: str = "farebox-scan") -> tuple[list[tuple[str, int]], dict[TopicPartition, int]]:
    """The (event id, offset + 1) of the last ``window`` records of every partition of ``topics``,
    and each partition's end offset. Reads only the ``fb-id`` header, never the values."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, client_id=client_id,
                                request_timeout_ms=5000)
    ids: list[tuple[str, int]] = []
    try:
        await consumer.start()  # inside the try: a start cut short (timeout, close) must still close
        tps = [TopicPartition(t, p) for t in topics for p in await partitions_of(consumer, t)]
        if not tps:
            return ids, {}
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        if window <= 0:
            return ids, ends
        starts = await consumer.beginning_offsets(tps)
        todo = {}
        for tp in tps:
            if ends[tp] > starts[tp]:
                consumer.seek(tp, max(starts[tp], ends[tp] - window))
                todo[tp] = ends[tp]
        while todo:
            batch = await consumer.getmany(*todo, timeout_ms=1000)
            for tp, records in batch.items():
                for record in records:
                    event_id = dict(record.headers).get(ID_HEADER)
                    if event_id is not None and record.offset < todo.get(tp, 0):
                        ids.append((event_id.decode(), record.offset + 1))
            for tp in list(todo):
                if await consumer.position(tp) >= todo[tp]:
                    del todo[tp]
        return ids, ends
    finally:
        await stop_consumer(consumer)


def stop_if_cancelled() -> None:
    """Raise ``CancelledError`` when the current task was asked to stop, even if a library swallowed it.

    aiokafka, like redis-py (``proxy/cancellation.py`` says more), can turn a cancelled connect into an
    ordinary error or none: a retry loop that catches ``Exception`` then never ends. Such a loop calls this
    in its error handler and before it sleeps (``tests/streams/test_config_topic_close.py``)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def stop_consumer(consumer: AIOKafkaConsumer) -> None:
    """``consumer.stop()``, minus an aiokafka quirk: stopped before its group-less coordinator's task
    first ran, ``stop()`` re-raises that task's cancellation and skips closing the fetcher and the
    connections. Finish those here; our own cancellation still propagates."""
    try:
        await consumer.stop()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        await close_consumer_parts(consumer)


async def abandon_producer(producer: AIOKafkaProducer) -> None:
    """Drop a producer without delivering what it still holds (the caller spooled those events).

    ``stop()`` would wait for every queued batch, forever while Kafka is away.
    Cancelling the sender task means no queued batch is ever sent later (so none
    can overtake the spool's replay); the batches' futures are left unresolved
    and go with the producer. Then the connections are closed.
    """
    await drop_producer_sender(producer)
    try:
        await producer.client.close()
    except Exception:  # noqa: BLE001 (best effort on a producer we are throwing away)
        log.debug("error while closing an abandoned Kafka producer", exc_info=True)
