"""The ``ResponseStore`` contract, run against every adapter (memory, SQLite, PostgreSQL, Redis)."""

from __future__ import annotations

import time
import uuid

from proxy.stored_responses import ResponseStore, StoredResponse, readable


def record(rid: str | None = None, team: str = "search", ttl: int = 3600, text: str = "hi") -> StoredResponse:
    now = int(time.time())
    rid = rid or f"resp_{uuid.uuid4().hex}"
    return StoredResponse(rid, team, "fb-search-1a2b", now, now + ttl,
                          {"id": rid, "object": "response", "output": [{"type": "message", "content": text}]},
                          [{"id": "msg_1", "type": "message", "role": "user", "content": "Hello"}])


class TestResponseStoreContract:
    async def test_is_a_store(self, store):
        assert isinstance(store, ResponseStore)

    async def test_a_record_reads_back_whole(self, store):
        kept = record(text="é ünïcode ✓")
        await store.put(kept)
        assert await store.get(kept.id, time.time()) == kept

    async def test_absent_is_none(self, store):
        assert await store.get("resp_missing", time.time()) is None

    async def test_put_again_replaces(self, store):
        first = record()
        await store.put(first)
        second = StoredResponse(first.id, first.team, first.key_id, first.created_at, first.expires_at,
                                {**first.response, "status": "completed"}, first.context)
        await store.put(second)
        assert await store.get(first.id, time.time()) == second

    async def test_expired_is_gone_even_before_a_sweep(self, store):
        kept = record(ttl=2)
        await store.put(kept)
        assert await store.get(kept.id, kept.expires_at + 1) is None

    async def test_delete_reports_whether_it_was_there(self, store):
        kept = record()
        await store.put(kept)
        assert await store.delete(kept.id) is True
        assert await store.get(kept.id, time.time()) is None
        assert await store.delete(kept.id) is False


def test_another_team_never_reads_a_record() -> None:
    kept = record(team="search")
    now = time.time()
    assert readable(kept, "search", now) is kept
    assert readable(kept, "billing", now) is None
    assert readable(kept, "search", kept.expires_at) is None
    assert readable(None, "search", now) is None


async def test_concurrent_puts_all_land(store) -> None:
    import asyncio

    kept = [record() for _ in range(50)]
    await asyncio.gather(*(store.put(r) for r in kept))
    assert [await store.get(r.id, time.time()) for r in kept] == kept


async def test_both_sqlite_adapters_read_each_others_file(tmp_path) -> None:
    from proxy.stored_responses.sql import SqlResponses
    from proxy.stored_responses.sqlite_store import SqliteResponses

    batched, plain = SqliteResponses(tmp_path / "r.sqlite"), SqlResponses(f"sqlite:///{tmp_path / 'r.sqlite'}")
    one, two = record(), record()
    await batched.put(one)
    await plain.put(two)
    assert await plain.get(one.id, time.time()) == one and await batched.get(two.id, time.time()) == two
    await batched.close()
    await plain.close()


async def test_write_behind_reads_its_own_writes_waits_for_others_and_loses_none(tmp_path) -> None:
    import asyncio

    from proxy.stored_responses import MemoryResponses
    from proxy.stored_responses.behind import WriteBehind

    class Slow(MemoryResponses):
        async def put(self, record: StoredResponse) -> None:
            await asyncio.sleep(0.05)
            await super().put(record)

        async def close(self) -> None:  # shared by both "processes": the test reads it after one closes
            return None

    shared = Slow()
    mine, other = WriteBehind(shared, miss_wait_s=0.0), WriteBehind(shared, miss_wait_s=1.0)
    kept = record()
    await mine.put(kept)  # returns before the store has it
    assert await shared.get(kept.id, time.time()) is None
    assert await mine.get(kept.id, time.time()) == kept  # this process: at once
    assert await other.get(kept.id, time.time()) == kept  # another process: once the write lands
    later = record()
    await mine.put(later)
    assert await mine.delete(later.id) is True and await mine.get(later.id, time.time()) is None
    last = record()
    await mine.put(last)
    await mine.close()  # shutdown waits for the writes still running
    assert await shared.get(last.id, time.time()) == last
    failures: list[str] = []

    class Down(MemoryResponses):
        async def put(self, record: StoredResponse) -> None:
            raise ConnectionError("store down")

    down = WriteBehind(Down(), miss_wait_s=0.0, on_failure=failures.append)
    await down.put(record())
    await down.close()
    assert failures == ["store_failed"]


async def test_write_behind_over_the_batching_store_reports_a_failed_commit(tmp_path) -> None:
    from proxy.stored_responses.behind import WriteBehind
    from proxy.stored_responses.sqlite_store import SqliteResponses

    class Broken(SqliteResponses):
        def _write(self, rows) -> None:  # type: ignore[no-untyped-def]
            raise OSError("disk full")

    failures: list[str] = []
    behind = WriteBehind(Broken(tmp_path / "r.sqlite"), miss_wait_s=0.0, on_failure=failures.append)
    kept = record()
    await behind.put(kept)
    assert await behind.get(kept.id, time.time()) == kept  # pending until the commit answers
    await behind.close()
    assert failures == ["store_failed"] and behind.pending == {}
