"""The ``BatchStore`` contract (``proxy.batches.records``), against SQLite and a real PostgreSQL: claims held by one
runner at a time, even racing; a runner whose claim passed on cannot record; a batch ends once, with its files."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time

import orjson
import pytest

from proxy.batches.lines import Line
from proxy.batches.objects import new_batch_id, new_file_id, unrun_line
from proxy.batches.records import Answer, BatchRecord, FileRecord, ProviderLine
from proxy.batches.sql_store import SqlBatches


def _batch(store: SqlBatches, n: int, *, now: int | None = None, window_s: int = 86_400) -> tuple[BatchRecord, list]:
    now = now or int(time.time())
    record = BatchRecord(new_batch_id(), store.team, "fb-key-1", "/v1/chat/completions", "file-in", "24h",  # type: ignore[attr-defined]
                         "in_progress", now, now + window_s, {"job": "tagger"}, [], {"in_progress_at": now})
    lines = [Line(i, f"c{i}", "chat-default", orjson.dumps({"model": "chat-default", "i": i})) for i in range(1, n + 1)]
    return record, lines


async def test_a_file_reads_back_and_lists_per_team(store: SqlBatches) -> None:
    now = int(time.time())
    mine = FileRecord(new_file_id(), store.team, "fb-key-1", "batch", "in.jsonl", 3, now)  # type: ignore[attr-defined]
    theirs = FileRecord(new_file_id(), store.team + "x", "fb-key-2", "batch", "in.jsonl", 3, now)  # type: ignore[attr-defined]
    await store.put_file(mine, b"abc")
    await store.put_file(theirs, b"xyz")
    assert await store.get_file(mine.id) == mine and await store.file_content(mine.id) == b"abc"
    assert [f.id for f in await store.list_files(store.team, None, None, 10, True)] == [mine.id]  # type: ignore[attr-defined]
    assert await store.delete_file(mine.id) is True and await store.delete_file(mine.id) is False
    assert await store.get_file(mine.id) is None and await store.file_content(mine.id) is None


async def test_racing_runners_never_hold_the_same_line(store: SqlBatches) -> None:
    record, lines = _batch(store, 60)
    await store.create_batch(record, lines)
    now = int(time.time())
    got = await asyncio.gather(*(store.claim(f"runner-{r}", now, now + 60, 7) for r in range(6)))
    numbers = [c.number for claims in got for c in claims if c.batch_id == record.id]
    assert len(numbers) == len(set(numbers)) == 42
    first = got[0][0]
    assert first.key_id == "fb-key-1" and first.endpoint == "/v1/chat/completions" and first.claims == 1


async def test_a_claim_past_its_time_is_taken_again_and_the_first_runner_cannot_record(store: SqlBatches) -> None:
    record, lines = _batch(store, 1)
    await store.create_batch(record, lines)
    now = int(time.time())
    (first,) = [c for c in await store.claim("a", now, now + 5, 50) if c.batch_id == record.id]
    assert not [c for c in await store.claim("b", now + 1, now + 6, 50) if c.batch_id == record.id]  # still a's
    (again,) = [c for c in await store.claim("b", now + 10, now + 70, 50) if c.batch_id == record.id]
    assert again.number == first.number and again.claims == 2
    assert await store.done(first, "a", True, b'{"late":1}', "r1") is False
    assert await store.done(again, "b", True, b'{"ok":1}', "r1") is True
    assert (await store.get_batch(record.id)).counts.completed == 1  # type: ignore[union-attr]


async def test_renewed_claims_stay_and_released_lines_wait_their_turn(store: SqlBatches) -> None:
    record, lines = _batch(store, 2)
    await store.create_batch(record, lines)
    now = int(time.time())
    held = [c for c in await store.claim("a", now, now + 5, 50) if c.batch_id == record.id]
    await store.renew(held, "a", now + 100)
    assert not [c for c in await store.claim("b", now + 10, now + 70, 50) if c.batch_id == record.id]
    await store.release(held[0], "a", now + 30)
    assert not [c for c in await store.claim("b", now + 10, now + 70, 50) if c.batch_id == record.id]
    (back,) = [c for c in await store.claim("b", now + 31, now + 90, 50) if c.batch_id == record.id]
    assert back.number == held[0].number and back.claims == 1  # a line given back was not a run ...
    assert (held[0].generation, back.generation) == (0, 1)  # ... and runs again under a request id of its own


async def test_a_batch_ends_once_with_its_output_and_error_files(store: SqlBatches) -> None:
    record, lines = _batch(store, 3)
    await store.create_batch(record, lines)
    now = int(time.time())
    claimed = [c for c in await store.claim("a", now, now + 60, 50) if c.batch_id == record.id]
    ids = itertools.count()
    assert record.id not in [b.id for b in await store.finish(now, lambda: f"file-{next(ids)}-{record.id}", unrun_line)]
    for c in claimed:
        await store.done(c, "a", c.number != 2, b'{"n":%d}' % c.number, f"r{c.number}")
    ended = [b for b in await store.finish(now, lambda: f"file-{next(ids)}-{record.id}", unrun_line)
             if b.id == record.id]
    assert [(b.status, b.counts.completed, b.counts.failed) for b in ended] == [("completed", 2, 1)]
    assert await store.file_content(ended[0].output_file_id) == b'{"n":1}\n{"n":3}\n'  # type: ignore[arg-type]
    assert await store.file_content(ended[0].error_file_id) == b'{"n":2}\n'  # type: ignore[arg-type]
    again = await store.finish(now + 1, lambda: f"file-{next(ids)}-{record.id}", unrun_line)
    assert record.id not in [b.id for b in again]  # ended once


async def test_cancel_runs_nothing_more_and_ends_once_the_lines_in_flight_are_done(store: SqlBatches) -> None:
    record, lines = _batch(store, 5)
    await store.create_batch(record, lines)
    now = int(time.time())
    (running,) = [c for c in await store.claim("a", now, now + 60, 1) if c.batch_id == record.id]
    assert (await store.cancel(record.id, now)).status == "cancelling"  # type: ignore[union-attr]
    assert not [c for c in await store.claim("b", now, now + 60, 50) if c.batch_id == record.id]
    assert record.id not in [b.id for b in await store.finish(now, new_file_id, unrun_line)]  # one in flight
    await store.done(running, "a", True, b'{"ran":1}', "r1")
    (ended,) = [b for b in await store.finish(now, new_file_id, unrun_line) if b.id == record.id]
    assert ended.status == "cancelled" and ended.times["cancelled_at"] == now and ended.error_file_id is None
    assert (ended.counts.total, ended.counts.completed) == (5, 1)
    assert (await store.cancel(record.id, now)).status == "cancelled"  # type: ignore[union-attr]


async def test_past_its_window_a_batch_expires_with_its_unrun_lines_in_the_error_file(store: SqlBatches) -> None:
    now = int(time.time())
    record, lines = _batch(store, 3, now=now - 100, window_s=50)
    await store.create_batch(record, lines)
    assert not [c for c in await store.claim("a", now, now + 60, 50) if c.batch_id == record.id]
    (ended,) = [b for b in await store.finish(now, new_file_id, unrun_line) if b.id == record.id]
    assert ended.status == "expired" and ended.counts.failed == 3 and ended.output_file_id is None
    errors = [orjson.loads(x) for x in (await store.file_content(ended.error_file_id)).splitlines()]  # type: ignore[union-attr,arg-type]
    assert [(e["custom_id"], e["error"]["code"], e["response"]) for e in errors] == [
        ("c1", "batch_expired", None), ("c2", "batch_expired", None), ("c3", "batch_expired", None)]


@pytest.mark.parametrize("n", [0, 2500])
async def test_a_batch_reads_back_with_its_counts(store: SqlBatches, n: int) -> None:
    record, lines = _batch(store, n)
    await store.create_batch(record, lines)
    got = await store.get_batch(record.id)
    assert got is not None and got.metadata == {"job": "tagger"} and got.counts.total == n
    assert record.id in [b.id for b in await store.list_batches(store.team, None, 10)]  # type: ignore[attr-defined]


async def test_runners_take_lines_from_each_team_in_turn(store: SqlBatches) -> None:
    now = int(time.time())
    big, big_lines = _batch(store, 50, now=now - 10)  # one team's large batch, created first
    other = SqlBatches.__new__(SqlBatches)
    other.team = store.team + "b"  # type: ignore[attr-defined]
    small, small_lines = _batch(other, 3, now=now)
    await store.create_batch(big, big_lines)
    await store.create_batch(small, small_lines)
    got = await store.claim("a", now, now + 60, 30)  # (the PostgreSQL server is shared: other tests' teams too)
    mine = [(c.batch_id, c.number) for c in got if c.batch_id in (big.id, small.id)]
    assert [n for b, n in mine if b == small.id] == [1, 2, 3]  # the small batch is not held back by the big one
    assert [n for b, n in mine if b == big.id] == list(range(1, len(mine) - 2))  # the big one: in line order


async def test_answers_are_kept_many_at_once_and_a_passed_claim_is_not(store: SqlBatches) -> None:
    record, lines = _batch(store, 3)
    await store.create_batch(record, lines)
    now = int(time.time())
    held = sorted((c for c in await store.claim("a", now, now + 5, 50) if c.batch_id == record.id),
                  key=lambda c: c.number)
    await store.renew(held[1:], "a", now + 100)  # a keeps lines 2 and 3; line 1's claim lapses ...
    taken = [c.number for c in await store.claim("b", now + 10, now + 70, 50) if c.batch_id == record.id]
    assert taken == [1]  # ... and passes to b
    answers = [Answer(c, True, b'{"n":%d}' % c.number, f"r{c.number}", 7) for c in held]
    assert await store.done_many(answers, "a") == 2
    got = await store.get_batch(record.id)
    assert got is not None and (got.counts.completed, got.counts.cost_micro) == (2, 14)


def _provider_batch(store: SqlBatches, n: int) -> tuple[BatchRecord, list]:
    record, lines = _batch(store, n)
    block = {"phase": "new", "deployment": "sim-openai", "hold_micro": 1000}
    return BatchRecord(**{**{f: getattr(record, f) for f in record.__slots__}, "provider": block}), lines  # type: ignore[attr-defined]


async def test_a_provider_batchs_lines_are_never_claimed_and_it_ends_only_by_its_run(store: SqlBatches) -> None:
    record, lines = _provider_batch(store, 5)
    await store.create_batch(record, lines)
    now = int(time.time())
    assert not [c for c in await store.claim("r", now, now + 60, 50) if c.batch_id == record.id]
    assert record.id in [b.id for b in await store.provider_batches()]
    await store.cancel(record.id, now)
    await store.finish(now + 100_000, new_file_id, unrun_line)  # past its window and cancelling: not the runner's
    assert (await store.get_batch(record.id)).status == "cancelling"  # type: ignore[union-attr]
    assert [n for n, _, _ in await store.batch_lines(record.id)] == [1, 2, 3, 4, 5]


async def test_a_provider_block_moves_by_compare_and_set(store: SqlBatches) -> None:
    record, lines = _provider_batch(store, 1)
    await store.create_batch(record, lines)
    old = record.provider
    assert old is not None
    sending = {**old, "phase": "submitting", "by": "a"}
    assert await store.set_provider(record.id, old, sending) is True
    assert await store.set_provider(record.id, old, {**old, "phase": "submitting", "by": "b"}) is False  # b lost
    assert (await store.get_batch(record.id)).provider == sending  # type: ignore[union-attr]


async def test_a_provider_batch_ends_once_with_its_results_and_files(store: SqlBatches) -> None:
    record, lines = _provider_batch(store, 4)
    await store.create_batch(record, lines)
    now = int(time.time())
    answers = [ProviderLine(1, True, b'{"custom_id":"c1"}', "r-1", 30, 60),
               ProviderLine(2, False, b'{"custom_id":"c2"}', "r-2", 0, 0),
               ProviderLine(3, True, b'{"custom_id":"c3"}', "r-3", 12, 24)]
    ended = await store.end_provider(record.id, "cancelled", answers, now, new_file_id, unrun_line)
    assert ended is not None and ended.status == "cancelled"
    assert (ended.counts.completed, ended.counts.failed, ended.counts.cost_micro) == (2, 2, 42)  # line 4 never ran
    assert ended.counts.list_micro == 84  # at the standard price
    assert await store.file_content(ended.output_file_id) == b'{"custom_id":"c1"}\n{"custom_id":"c3"}\n'  # type: ignore[arg-type]
    assert await store.end_provider(record.id, "completed", answers, now, new_file_id, unrun_line) is None
    assert record.id not in [b.id for b in await store.provider_batches()]


def test_a_store_made_before_the_savings_and_hold_columns_gets_them_as_it_opens(tmp_path) -> None:
    import sqlite3

    path = tmp_path / "old.sqlite"
    SqlBatches(f"sqlite:///{path}")
    with sqlite3.connect(path) as db:  # as a store of the version before made it
        db.execute("ALTER TABLE fb_batch_lines DROP COLUMN list_micro")
        db.execute("ALTER TABLE fb_batch_lines DROP COLUMN held_micro")
        db.execute("ALTER TABLE fb_batches DROP COLUMN releasing")
    SqlBatches(f"sqlite:///{path}")
    with sqlite3.connect(path) as db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(fb_batch_lines)")]
        assert "list_micro" in columns and "held_micro" in columns
        assert "releasing" in [row[1] for row in db.execute("PRAGMA table_info(fb_batches)")]


def _held_batch(store: SqlBatches, n: int, **kw: int) -> tuple[BatchRecord, list]:
    record, lines = _batch(store, n, **kw)
    reserved = {"team": store.team, "key_id": "fb-key-1", "scopes": ["team:" + store.team], "currency": "INR",  # type: ignore[attr-defined]
                "price_version": 1, "hold_ttl_s": 172_800, "release": None}
    return (dataclasses.replace(record, reserved=reserved),
            [dataclasses.replace(ln, held=1000 * ln.number) for ln in lines])


async def test_a_held_lines_first_run_has_its_hold_and_a_run_turned_away_unused_keeps_its_id(store: SqlBatches) -> None:
    record, lines = _held_batch(store, 2)
    await store.create_batch(record, lines)
    now = int(time.time())
    got = sorted((c for c in await store.claim("a", now, now + 60, 50) if c.batch_id == record.id),
                 key=lambda c: c.number)
    assert [(c.number, c.held, c.generation) for c in got] == [(1, 1000, 0), (2, 2000, 0)]
    await store.release(got[0], "a", now, used=False)  # turned away before admission: same id, same hold
    await store.release(got[1], "a", now)  # admitted, then "not now": its next run is a request of its own
    again = {c.number: c for c in await store.claim("a", now, now + 60, 50) if c.batch_id == record.id}
    assert (again[1].generation, again[2].generation) == (0, 1)
    assert (await store.get_batch(record.id)).reserved["scopes"] == ["team:" + store.team]  # type: ignore[union-attr,attr-defined]


async def test_an_ended_held_batch_lists_its_unrun_lines_holds_until_they_are_released(store: SqlBatches) -> None:
    record, lines = _held_batch(store, 4)
    await store.create_batch(record, lines)
    now = int(time.time())
    claimed = {c.number: c for c in await store.claim("a", now, now + 60, 2) if c.batch_id == record.id}
    ran, given_back = claimed[1], claimed[2]
    await store.done(ran, "a", True, b'{"ran":1}', f"{record.id}-1")
    await store.release(given_back, "a", now)  # used: its first id's hold was settled by that run
    await store.cancel(record.id, now)
    (ended,) = [b for b in await store.finish(now, new_file_id, unrun_line) if b.id == record.id]
    assert ended.status == "cancelled" and ended.reserved["release"] == [[3, 3000], [4, 4000]]  # type: ignore[index]
    assert record.id in [b.id for b in await store.releasing()]
    await store.released(record.id)
    assert record.id not in [b.id for b in await store.releasing()]


async def test_an_expired_held_batch_releases_its_unrun_lines_but_not_one_a_dead_runner_held(
        store: SqlBatches) -> None:
    now = int(time.time())
    record, lines = _held_batch(store, 3, now=now - 100, window_s=90)
    await store.create_batch(record, lines)
    (dead,) = [c for c in await store.claim("gone", now - 50, now - 40, 1) if c.batch_id == record.id]
    (ended,) = [b for b in await store.finish(now, new_file_id, unrun_line) if b.id == record.id]
    assert ended.status == "expired" and dead.number == 1
    assert ended.reserved["release"] == [[2, 2000], [3, 3000]]  # type: ignore[index]  # line 1 may have been served


async def test_a_batch_admitted_line_by_line_has_nothing_to_release(store: SqlBatches) -> None:
    record, lines = _batch(store, 2)
    await store.create_batch(record, lines)
    await store.cancel(record.id, int(time.time()))
    (ended,) = [b for b in await store.finish(int(time.time()), new_file_id, unrun_line) if b.id == record.id]
    assert ended.reserved is None and record.id not in [b.id for b in await store.releasing()]
