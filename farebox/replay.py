"""``farebox replay --from --to``: rebuild scope balances from the archive (or Kafka) and compare with live.

Reads every request event with an event date in [from, to] (deduplicated by
id, in partition/offset order), rebuilds the scope balances with the same
pure fold the worker runs (``ledger.splitting.rebuild_balances``), and
compares settled, held, overrun and requests of the current period with the
projections the worker wrote to Redis. Prints every difference; exit 0 when
there is none, 1 otherwise. Records that are not events the codec reads are
skipped, as the worker skips them (``streams.dead_letters``), and counted in
the summary line: from Kafka those read, from the archive those it keeps under
``_unreadable/``. From the archive it also reports the archiver group's lag
(records of the topic it has not committed), so differences that are only
that lag are not mistaken for tampering. Embedded mode: ``farebox.replay_embedded``.
"""

from __future__ import annotations

import asyncio
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Iterable
from zoneinfo import ZoneInfo

import redis.asyncio as aioredis

from farebox.settings import Settings
from ledger.codec import decode
from ledger.events import Event
from ledger.leases import ScopeLedger
from ledger.periods import period_of
from ledger.splitting import rebuild_balances
from streams.archive.kafka_source import archiver_lag
from streams.dead_letters import READ_ERRORS
from streams.projections import RedisProjections

FIELDS = ("settled", "held", "overrun", "requests")


def archived_events(root: Path, start: date, end: date) -> list[Event]:
    from streams.archive.read import read_archive

    table = read_archive(root, start, end, columns=["event"])
    return [decode(text) for text in table.column("event").to_pylist()]


async def _kafka_events(bootstrap: str, topic: str, start: date, end: date) -> tuple[list[Event], int]:
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


def differences(rebuilt: dict[str, ScopeLedger], live: dict[str, dict[str, str]], period: str) -> list[str]:
    out = []
    for scope in sorted(rebuilt.keys() | live.keys()):
        state = rebuilt.get(scope)
        totals = state.periods.get(period) if state else None
        row = live.get(scope, {})
        if row and row.get("period") != period:
            row = {}
        for name in FIELDS:
            mine = getattr(totals, name) if totals else 0
            theirs = int(row.get(name, 0) or 0)
            if mine != theirs:
                out.append(f"{scope} {period} {name}: replay {mine} != live {theirs}")
    return out


def replay(settings: Settings, start: str, end: str, *, source: str = "archive", archive: str | None = None,
           now: datetime | None = None, archive_first: bool = False) -> int:
    """Embedded mode: ``farebox.replay_embedded``. Distributed: the archive (or Kafka) against Redis."""
    if settings.mode == "embedded":
        from farebox.replay_embedded import replay_embedded

        return replay_embedded(settings, start, end, archive=archive, archive_first=archive_first)
    d = settings.distributed
    first, last = date.fromisoformat(start), date.fromisoformat(end)
    tz = ZoneInfo(settings.snapshot.budgets.timezone)
    if source == "archive":
        from streams.archive.read import read_unreadable, require_archive

        root = Path(archive) if archive else settings.archive_root
        require_archive(root)
        events: Iterable[Event] = archived_events(root, first, last)
        unreadable = read_unreadable(root).num_rows
    else:
        events, unreadable = asyncio.run(_kafka_events(d.bootstrap, d.requests_topic, first, last))
    rebuilt = rebuild_balances(events, tz)

    async def live() -> dict[str, dict[str, str]]:
        client = aioredis.Redis.from_url(d.redis_url)
        try:
            return await RedisProjections(client).all_scopes()
        finally:
            await client.aclose()

    period = period_of(now or datetime.now(timezone.utc), tz)
    diffs = differences(rebuilt, asyncio.run(live()), period)
    for line in diffs:
        print(line)
    skipped = f", {unreadable} unreadable record(s) skipped" if unreadable else ""
    print(f"replay {first}..{last} from {source}: {len(rebuilt)} scopes, {len(diffs)} difference(s){skipped}")
    if source == "archive" and (lag := asyncio.run(archiver_lag(d.bootstrap, d.requests_topic,
                                                                settings.archive.group_id))):
        print(f"note: the archiver ({settings.archive.group_id}) is {lag} record(s) behind {d.requests_topic}; "
              f"differences may be only that lag")
    return 0 if not diffs else 1
