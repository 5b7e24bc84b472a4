"""What the in-memory stores keep is right-sized: orjson's output holds its whole write buffer (about 8 KB for a
small answer), ``kept`` copies it into an object of its own size, and the stores keep that copy."""

from __future__ import annotations

import asyncio
import tracemalloc

import orjson

from proxy.body import kept
from proxy.cache.memory import MemoryCache
from proxy.idempotency.memory import MemoryIdempotency
from proxy.idempotency.port import Record, StoredAnswer

ANSWER = {"id": "chatcmpl-1", "choices": [{"message": {"role": "assistant", "content": "x" * 600}}]}


def _traced(make) -> float:  # type: ignore[no-untyped-def]
    """Bytes held per object made by ``make`` (1,000 of them kept alive)."""
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        held = [make(i) for i in range(1000)]
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    assert len(held) == 1000
    return sum(s.size_diff for s in after.compare_to(before, "filename")) / 1000


def test_kept_bytes_are_right_sized_and_equal() -> None:
    raw = orjson.dumps(ANSWER)
    assert kept(raw) == raw and type(kept(raw)) is bytes
    assert _traced(lambda i: kept(orjson.dumps(ANSWER))) < 2 * len(raw)


def test_the_stores_keep_right_sized_copies() -> None:
    async def fill() -> tuple[MemoryCache, MemoryIdempotency]:
        cache, idem = MemoryCache(), MemoryIdempotency()
        for i in range(500):
            await cache.put(f"k{i}", orjson.dumps(ANSWER), 60)
            await idem.claim(f"s{i}", Record(f"r{i}", "fp", "pending"), 60)
            await idem.complete(f"s{i}", Record(f"r{i}", "fp", "done", StoredAnswer(200, orjson.dumps(ANSWER), {})),
                                60)
        return cache, idem

    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        stores = asyncio.run(fill())
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    held = sum(s.size_diff for s in after.compare_to(before, "filename"))
    assert held < 1000 * 3_000, held  # without the copies: over 16 MB (8 KB a value, two stores, 500 each)
    assert stores[1]._bytes > 0
