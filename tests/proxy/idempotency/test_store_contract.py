"""The ``IdempotencyStore`` contract, run against MemoryIdempotency and RedisIdempotency (real redis-server)."""

from __future__ import annotations

import asyncio
import sqlite3

from proxy.idempotency import IdempotencyStore, Record, StoredAnswer

ANSWER = StoredAnswer(200, b'{"id":"chatcmpl-req_1"}', {"content-type": "application/json", "x-fb-deployment": "d"})


def pending(rid: str = "req_1", fp: str = "fp1") -> Record:
    return Record(rid, fp, "pending")


class TestIdempotencyStoreContract:
    async def test_is_a_store(self, store):
        assert isinstance(store, IdempotencyStore)

    async def test_first_claim_is_fresh_and_a_second_sees_the_first(self, store):
        first = await store.claim("k:a", pending("req_1"), 60)
        assert first.fresh and first.record == pending("req_1")
        second = await store.claim("k:a", pending("req_2", "fp2"), 60)
        assert not second.fresh
        assert second.record == pending("req_1")

    async def test_slots_are_separate(self, store):
        assert (await store.claim("k1:a", pending("req_1"), 60)).fresh
        assert (await store.claim("k2:a", pending("req_2"), 60)).fresh

    async def test_racing_claims_have_exactly_one_winner(self, store):
        claims = await asyncio.gather(*(store.claim("race", pending(f"req_{i}"), 60) for i in range(20)))
        winners = [c for c in claims if c.fresh]
        assert len(winners) == 1
        assert {c.record.request_id for c in claims} == {winners[0].record.request_id}

    async def test_complete_stores_the_answer_for_replay(self, store):
        await store.claim("k:done", pending(), 60)
        done = Record("req_1", "fp1", "done", ANSWER)
        assert await store.complete("k:done", done, 60)
        found = await store.claim("k:done", pending("req_2"), 60)
        assert not found.fresh
        assert found.record == done
        assert found.record.answer.body == ANSWER.body and found.record.answer.headers == ANSWER.headers

    async def test_complete_by_another_request_changes_nothing(self, store):
        await store.claim("k:other", pending("req_1"), 60)
        assert not await store.complete("k:other", Record("req_9", "fp1", "done", ANSWER), 60)
        assert not await store.complete("k:none", Record("req_9", "fp1", "done", ANSWER), 60)
        assert (await store.claim("k:other", pending("req_2"), 60)).record == pending("req_1")

    async def test_complete_twice_keeps_the_first_answer(self, store):
        await store.claim("k:twice", pending(), 60)
        assert await store.complete("k:twice", Record("req_1", "fp1", "done", ANSWER), 60)
        later = StoredAnswer(200, b"{}", {})
        assert not await store.complete("k:twice", Record("req_1", "fp1", "done", later), 60)
        assert (await store.claim("k:twice", pending("req_2"), 60)).record.answer == ANSWER

    async def test_release_frees_the_slot_only_for_its_holder(self, store):
        await store.claim("k:rel", pending("req_1"), 60)
        await store.release("k:rel", "req_2")
        assert not (await store.claim("k:rel", pending("req_2"), 60)).fresh
        await store.release("k:rel", "req_1")
        assert (await store.claim("k:rel", pending("req_3"), 60)).fresh

    async def test_records_expire_after_their_ttl(self, store):
        await store.claim("k:ttl", pending("req_1"), 0.15)
        assert not (await store.claim("k:ttl", pending("req_2"), 60)).fresh
        await asyncio.sleep(0.3)
        assert (await store.claim("k:ttl", pending("req_3"), 60)).fresh

    async def test_a_done_record_lives_for_the_answer_ttl(self, store):
        await store.claim("k:ttl2", pending("req_1"), 0.15)
        await store.complete("k:ttl2", Record("req_1", "fp1", "done", ANSWER), 60)
        await asyncio.sleep(0.3)
        assert (await store.claim("k:ttl2", pending("req_2"), 60)).record.state == "done"

    async def test_stream_records_round_trip(self, store):
        rec = Record("req_s", "fp", "stream")
        await store.claim("k:s", rec, 60)
        assert (await store.claim("k:s", pending("req_2"), 60)).record == rec

    async def test_non_ascii_bodies_survive(self, store):
        answer = StoredAnswer(200, '{"content":"नमस्ते ₹"}'.encode(), {"content-type": "application/json"})
        await store.claim("k:u", pending(), 60)
        await store.complete("k:u", Record("req_1", "fp1", "done", answer), 60)
        assert (await store.claim("k:u", pending("req_2"), 60)).record.answer.body == answer.body


async def test_the_memory_store_evicts_the_oldest_answers_past_its_byte_cap_never_a_pending_claim() -> None:
    from proxy.idempotency import MemoryIdempotency
    from proxy.idempotency.memory import ENTRY_OVERHEAD

    def size(slot: str, record: Record) -> int:  # what the store counts: the record's bytes, its key, the entry
        return len(record.dumps()) + len(slot) + ENTRY_OVERHEAD

    # room for the held claim and two answers (each answer about the size of the last): the third evicts the first
    store = MemoryIdempotency(max_bytes=size("held", pending("req_p")) + 2 * size("s0", Record("req_0", "fp1",
                                                                                                "done", ANSWER)))
    await store.claim("held", pending("req_p"), 60)
    for i in range(3):
        await store.claim(f"s{i}", pending(f"req_{i}"), 60)
        await store.complete(f"s{i}", Record(f"req_{i}", "fp1", "done", ANSWER), 60)
    assert (await store.claim("s0", pending("req_x"), 60)).fresh  # the oldest answer went
    assert not (await store.claim("s2", pending("req_y"), 60)).fresh
    assert (await store.claim("held", pending("req_z"), 60)).record.request_id == "req_p"


async def test_the_disk_store_evicts_the_oldest_answers_past_its_byte_cap_never_a_pending_claim(tmp_path) -> None:
    from proxy.idempotency.sqlite_store import ROW_OVERHEAD, SqliteIdempotency

    def size(slot: str, record: Record) -> int:  # what the store counts: the record's bytes, its key, the row
        return len(record.dumps()) + len(slot) + ROW_OVERHEAD

    store = SqliteIdempotency(tmp_path / "idem.sqlite", max_bytes=size("held", pending("req_p")) + 2 * size(
        "s0", Record("req_0", "fp1", "done", ANSWER)))
    await store.claim("held", pending("req_p"), 60)
    for i in range(3):
        await store.claim(f"s{i}", pending(f"req_{i}"), 60)
        await store.complete(f"s{i}", Record(f"req_{i}", "fp1", "done", ANSWER), 60)
    assert (await store.claim("s0", pending("req_x"), 60)).fresh  # the oldest answer went
    assert not (await store.claim("s2", pending("req_y"), 60)).fresh
    assert (await store.claim("held", pending("req_z"), 60)).record.request_id == "req_p"
    await store.close()


async def test_the_disk_store_keeps_its_answers_across_a_restart_until_their_ttl(tmp_path) -> None:
    from proxy.idempotency.sqlite_store import SqliteIdempotency

    now = [1_800_000_000.0]
    first = SqliteIdempotency(tmp_path / "idem.sqlite", clock=lambda: now[0])
    await first.claim("k:kept", pending("req_1"), 60)
    await first.complete("k:kept", Record("req_1", "fp1", "done", ANSWER), 3600)
    await first.claim("k:short", pending("req_2"), 30)
    await first.close()
    again = SqliteIdempotency(tmp_path / "idem.sqlite", clock=lambda: now[0])  # the gateway restarted
    assert (await again.claim("k:kept", pending("req_3"), 60)).record.answer == ANSWER  # replayed, billed once
    now[0] += 60
    assert (await again.claim("k:short", pending("req_4"), 60)).fresh  # a claim's TTL passed meanwhile
    for i in range(20):
        await again.claim(f"k:{i}", pending(f"r{i}"), 1)
    now[0] += 10
    await again._run(again._sweep)  # (every 1,024 writes) drops what expired and recounts the rows' size
    with sqlite3.connect(tmp_path / "idem.sqlite") as db:
        assert sorted(s for (s,) in db.execute("SELECT slot FROM fb_idempotency")) == ["k:kept", "k:short"]
    await again.close()
