"""The ``VectorStore`` contract, run against MemoryVectors and RedisVectors (real redis-server), on a test clock."""

from __future__ import annotations

import math
import random
from decimal import Decimal

import pytest

from proxy.cache import MemoryVectors, VectorStore
from proxy.cache.similarity import best_match, normalised
from proxy.cache.vector_memory import SCAN_CHUNK, scan
from proxy.cache.vector_redis import RedisVectors

T = Decimal("0.9")


def unit(*values: float):  # type: ignore[no-untyped-def]
    v = normalised(values)
    assert v is not None
    return v


def at_angle(degrees: float):  # type: ignore[no-untyped-def]
    """A unit vector at ``degrees`` from (1, 0, 0): its similarity to it is cos(degrees)."""
    r = math.radians(degrees)
    return unit(math.cos(r), math.sin(r), 0.0)


class TestVectorContract:
    async def test_is_a_vector_store(self, vectors) -> None:
        assert isinstance(vectors, VectorStore)

    async def test_an_empty_namespace_has_no_nearest(self, vectors) -> None:
        assert await vectors.nearest("ns:empty", unit(1, 0, 0), T) is None

    async def test_a_close_vector_is_a_hit_with_its_bytes(self, vectors) -> None:
        value = b'{"kind":"chat"}\x00\xff'
        await vectors.add("ns:a", at_angle(0), value, 60)
        match = await vectors.nearest("ns:a", at_angle(10), T)  # cos 10 deg = 0.985
        assert match is not None and match.value == value
        assert match.similarity == pytest.approx(math.cos(math.radians(10)), abs=1e-6)

    async def test_below_the_threshold_the_score_comes_without_the_bytes(self, vectors) -> None:
        await vectors.add("ns:b", at_angle(0), b"v", 60)
        match = await vectors.nearest("ns:b", at_angle(30), T)  # cos 30 deg = 0.866
        assert match is not None and match.value is None
        assert match.similarity == pytest.approx(math.cos(math.radians(30)), abs=1e-6)

    async def test_the_most_similar_entry_answers(self, vectors) -> None:
        for degrees, value in ((20, b"twenty"), (5, b"five"), (40, b"forty")):
            await vectors.add("ns:c", at_angle(degrees), value, 60)
        match = await vectors.nearest("ns:c", at_angle(0), T)
        assert match is not None and match.value == b"five"

    async def test_namespaces_are_separate(self, vectors) -> None:
        await vectors.add("ns:team-a", at_angle(0), b"a", 60)
        assert await vectors.nearest("ns:team-b", at_angle(0), T) is None

    async def test_an_entry_expires_after_its_ttl(self, vectors, clock) -> None:
        await vectors.add("ns:ttl", at_angle(0), b"v", 60)
        clock.now += 59
        assert (await vectors.nearest("ns:ttl", at_angle(0), T)).value == b"v"
        clock.now += 2
        assert await vectors.nearest("ns:ttl", at_angle(0), T) is None

    async def test_a_namespace_keeps_its_newest_entries_within_its_bound(self, vectors, clock) -> None:
        for i in range(5):  # the fixtures' bound is 3 per namespace
            clock.now += 1
            await vectors.add("ns:bound", at_angle(i * 2), f"e{i}".encode(), 60)
        assert (await vectors.nearest("ns:bound", at_angle(0), Decimal("0.999"))).value is None  # e0 has left
        assert (await vectors.nearest("ns:bound", at_angle(4), Decimal("0.9999"))).value == b"e2"
        await vectors.add("ns:other", at_angle(0), b"other", 60)  # another namespace's bound is its own
        assert (await vectors.nearest("ns:bound", at_angle(8), Decimal("0.9999"))).value == b"e4"

    async def test_a_zero_ttl_stores_nothing(self, vectors) -> None:
        await vectors.add("ns:zero", at_angle(0), b"v", 0)
        assert await vectors.nearest("ns:zero", at_angle(0), T) is None


async def test_memory_vectors_keep_within_their_entry_and_byte_bounds_least_recently_used_first() -> None:
    store = MemoryVectors(max_entries=2)
    await store.add("a", at_angle(0), b"1", 60)
    await store.add("b", at_angle(0), b"2", 60)
    assert (await store.nearest("a", at_angle(0), T)).value == b"1"  # a is now the most recently used
    await store.add("c", at_angle(0), b"3", 60)
    assert await store.nearest("b", at_angle(0), T) is None and len(store) == 2
    sized = MemoryVectors(max_bytes=2 * (100 + 12))  # an entry: its bytes plus 4 per component
    for ns in ("x", "y", "z"):
        await sized.add(ns, at_angle(0), b"v" * 100, 60)
    assert len(sized) == 2 and await sized.nearest("x", at_angle(0), T) is None
    await sized.add("huge", at_angle(0), b"v" * 300, 60)  # larger than the whole store: not stored, none evicted
    assert len(sized) == 2


async def test_an_unreachable_redis_is_a_miss_and_a_skipped_store() -> None:
    store = RedisVectors.from_url("redis://127.0.0.1:1/0", timeout_s=0.05)  # nothing listens on port 1
    try:
        await store.add("ns", at_angle(0), b"v", 60)
        assert await store.nearest("ns", at_angle(0), T) is None
    finally:
        await store.close()


async def test_redis_keys_of_an_idle_namespace_expire_by_themselves(cache_redis) -> None:
    store = RedisVectors.from_url(cache_redis.url, key_prefix="t:idle:", timeout_s=1.0)
    try:
        await store.add("ns", at_angle(0), b"v", 30)
        ttls = [await store.client.pttl(k) for k in store._keys("ns")]
        assert all(0 < t <= 30_000 for t in ttls)
        await store.add("ns", at_angle(1), b"w", 90)  # the longest TTL stored keeps the keys
        ttls = [await store.client.pttl(k) for k in store._keys("ns")]
        assert all(30_000 < t <= 90_000 for t in ttls)
    finally:
        await store.client.delete(*store._keys("ns"))
        await store.close()


async def test_a_scan_in_chunks_finds_what_one_pass_finds() -> None:
    rng = random.Random(3)
    query = unit(1.0, 0.5, 0.25)
    for n in (0, 1, SCAN_CHUNK - 1, SCAN_CHUNK, 3 * SCAN_CHUNK + 5):
        cands = [(i, unit(rng.gauss(0, 1), rng.gauss(0, 1), rng.gauss(0, 1))) for i in range(n)]
        cands += [(n, cands[0][1])] if cands else []  # an equal later on: the first one wins
        assert await scan(query, cands) == best_match(query, cands)
