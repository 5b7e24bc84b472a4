"""Where replay reads events and the live state from: the archive, the requests topic, the SQLite log, Redis.

``archived_events`` reads the archive (each event id once); ``kafka_events`` the requests topic from its
earliest offsets (first occurrence of each id, records the codec cannot read counted, not raised, as the
worker skips them: ``streams.dead_letters``); ``log_events`` the embedded SQLite log read-only (so
``farebox serve`` may be running); ``live_scopes`` the worker's projections in Redis. What the two sides
mean and how they are compared is ``ledger.replay``.
"""

from __future__ import annotations

import asyncio
from datetime import date
from pathlib import Path

import orjson

from ledger.codec import decode, from_dict
from ledger.events import Event
from streams.dead_letters import READ_ERRORS
from streams.sqlite_log import SqliteEventLog


def archived_events(root: Path, start: date, end: date) -> list[Event]:
    from streams.archive.read import read_archive

    table = read_archive(root, start, end, columns=["event"])
    return [decode(text) for text in table.column("event").to_pylist()]


async def kafka_events(bootstrap: str, topic: str, start: date, end: date) -> tuple[list[Event], int]:
    """Every event of ``topic`` from the earliest offsets, first occurrence of each id, dated in [start, end];
    and how many records could not be read (skipped)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from streams.kafka.clients import partitions_of

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in await partitions_of(consumer, topic)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out: list[tuple[int, int, Event]] = []
        unreadable = 0
        while any([await consumer.position(tp) < ends[tp] for tp in tps]):
            for tp, records in (await consumer.getmany(timeout_ms=1000)).items():
                for r in records:
                    try:
                        out.append((tp.partition, r.offset, decode(r.value)))
                    except READ_ERRORS:
                        unreadable += 1
    finally:
        await asyncio.sleep(0)
        await consumer.stop()
    seen: set[str] = set()
    events = []
    for _, _, event in sorted(out, key=lambda r: (r[0], r[1])):
        if event.id not in seen and start <= event.time.date() <= end:
            seen.add(event.id)
            events.append(event)
    return events, unreadable


async def log_events(path: Path, first: date, last: date, page: int = 10_000) -> tuple[list[Event], int]:
    """The log's events dated [first, last], in offset order, and the log's last offset. Only events in
    the window are decoded (their UTC date is the prefix of the stored ``time``)."""
    lo, hi = first.isoformat(), last.isoformat()
    log = SqliteEventLog.open(path, readonly=True)
    try:
        head = log.last_offset
        out: list[Event] = []
        after = 0
        while after < head and (rows := await log.read_payloads(after=after, limit=page)):
            for offset, payload in rows:
                wire = orjson.loads(payload)
                if offset <= head and lo <= wire["time"][:10] <= hi:
                    out.append(from_dict(wire))
            after = rows[-1][0]
        return out, head
    finally:
        await log.close()


async def live_scopes(redis_url: str) -> dict[str, dict[str, str]]:
    """Every scope's row of the worker's projections in Redis."""
    import redis.asyncio as aioredis

    from streams.projections import RedisProjections

    client = aioredis.Redis.from_url(redis_url)
    try:
        return await RedisProjections(client).all_scopes()
    finally:
        await client.aclose()
