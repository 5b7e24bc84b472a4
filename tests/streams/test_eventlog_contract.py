"""The EventLog contract, run against every adapter (see conftest ``open_log``)."""

from __future__ import annotations

import asyncio

import pytest
from stream_events import make_event

from streams.eventlog import EventLog, EventLogClosed


class TestEventLogContract:
    async def test_is_an_event_log(self, open_log):
        assert isinstance(open_log(), EventLog)

    async def test_empty_log(self, open_log):
        log = open_log()
        assert log.last_offset == 0
        assert await log.read() == []
        await log.flush()

    async def test_append_returns_at_once_and_resolves_with_offsets_in_order(self, open_log):
        log = open_log()
        events = [make_event(i) for i in range(10)]
        futures = [log.append(e) for e in events]  # no await between: must not block
        assert await asyncio.gather(*futures) == list(range(1, 11))
        assert await log.read() == list(zip(range(1, 11), events))
        assert log.last_offset == 10

    async def test_read_pages_by_offset(self, open_log):
        log = open_log()
        for i in range(25):
            log.append(make_event(i))
        await log.flush()
        page = await log.read(after=10, limit=5)
        assert [offset for offset, _ in page] == [11, 12, 13, 14, 15]
        assert [event for _, event in page] == [make_event(i) for i in range(10, 15)]
        assert await log.read(after=25) == []
        assert len(await log.read(limit=1000)) == 25

    async def test_duplicate_id_is_a_no_op_with_the_existing_offset(self, open_log):
        log = open_log()
        first = log.append(make_event(1))
        again_same_batch = log.append(make_event(1))
        other = log.append(make_event(2))
        assert (await first, await again_same_batch, await other) == (1, 1, 2)
        assert await log.append(make_event(1)) == 1  # later batch too
        assert [offset for offset, _ in await log.read()] == [1, 2]
        assert log.last_offset == 2

    async def test_dedupe_survives_reopen(self, open_log):
        log = open_log()
        await log.append(make_event(7))
        await log.close()
        reopened = open_log()
        assert await reopened.append(make_event(7)) == 1
        assert await reopened.append(make_event(8)) == 2  # offsets continue

    async def test_flush_makes_everything_appended_durable(self, open_log):
        log = open_log()
        futures = [log.append(make_event(i)) for i in range(500)]
        await log.flush()
        assert all(f.done() for f in futures)
        assert log.last_offset == 500
        assert len(await log.read(limit=10_000)) == 500

    async def test_close_loses_nothing_accepted(self, open_log):
        log = open_log()
        futures = [log.append(make_event(i)) for i in range(1000)]
        await log.close()
        assert [f.result() for f in futures] == list(range(1, 1001))
        with pytest.raises(EventLogClosed):
            log.append(make_event(5000))
        with pytest.raises(EventLogClosed):
            await log.read()
        await log.close()  # idempotent
        reopened = open_log()
        assert [e for _, e in await reopened.read(limit=5000)] == [make_event(i) for i in range(1000)]

    async def test_many_concurrent_appenders(self, open_log):
        log = open_log()

        async def producer(team: int) -> list[int]:
            offsets = []
            for i in range(40):
                if i % 2:
                    offsets.append(await log.append(make_event(team * 1000 + i, team=f"t{team}")))
                else:
                    future = log.append(make_event(team * 1000 + i, team=f"t{team}"))
                    await asyncio.sleep(0)
                    offsets.append(await future)
            return offsets

        results = await asyncio.gather(*(producer(t) for t in range(50)))
        for offsets in results:
            assert offsets == sorted(offsets)  # each producer's order is kept
        everything = [o for offsets in results for o in offsets]
        assert sorted(everything) == list(range(1, 2001))
        read = await log.read(limit=5000)
        assert [o for o, _ in read] == list(range(1, 2001))
        assert {e.id for _, e in read} == {make_event(t * 1000 + i).id for t in range(50) for i in range(40)}
