"""The ``CachePort`` contract, run against MemoryCache and RedisCache (real redis-server)."""

from __future__ import annotations

import asyncio

from proxy.cache import CachePort, MemoryCache
from proxy.cache.redis_cache import RedisCache


class TestCacheContract:
    async def test_is_a_cache_port(self, cache):
        assert isinstance(cache, CachePort)

    async def test_a_stored_value_comes_back_byte_for_byte(self, cache):
        value = b'{"kind":"chat","body":{"choices":[]}}\x00\xff'
        await cache.put("k:a", value, 60)
        assert await cache.get("k:a") == value

    async def test_an_unknown_key_is_a_miss(self, cache):
        assert await cache.get("k:never") is None

    async def test_a_put_replaces_the_value(self, cache):
        await cache.put("k:b", b"one", 60)
        await cache.put("k:b", b"two", 60)
        assert await cache.get("k:b") == b"two"

    async def test_keys_are_separate(self, cache):
        await cache.put("k:c1", b"1", 60)
        await cache.put("k:c2", b"2", 60)
        assert (await cache.get("k:c1"), await cache.get("k:c2")) == (b"1", b"2")

    async def test_an_entry_expires_after_its_ttl(self, cache):
        await cache.put("k:ttl", b"v", 0.05)
        assert await cache.get("k:ttl") == b"v"
        await asyncio.sleep(0.12)
        assert await cache.get("k:ttl") is None

    async def test_a_zero_ttl_stores_nothing(self, cache):
        await cache.put("k:zero", b"v", 0)
        assert await cache.get("k:zero") is None


async def test_memory_cache_evicts_the_least_recently_used_first() -> None:
    cache = MemoryCache(max_entries=2)
    await cache.put("a", b"1", 60)
    await cache.put("b", b"2", 60)
    assert await cache.get("a") == b"1"  # a is now the most recently used
    await cache.put("c", b"3", 60)
    assert await cache.get("b") is None and await cache.get("a") == b"1" and await cache.get("c") == b"3"


async def test_memory_cache_keeps_within_its_byte_bound() -> None:
    cache = MemoryCache(max_bytes=10)
    await cache.put("a", b"12345", 60)
    await cache.put("b", b"67890", 60)
    await cache.put("c", b"x", 60)
    assert await cache.get("a") is None and len(cache) == 2
    await cache.put("huge", b"x" * 11, 60)  # larger than the whole cache: not stored, nothing evicted
    assert await cache.get("huge") is None and len(cache) == 2


async def test_an_unreachable_redis_is_a_miss_and_a_skipped_store() -> None:
    cache = RedisCache.from_url("redis://127.0.0.1:1/0", timeout_s=0.05)  # nothing listens on port 1
    try:
        await cache.put("k", b"v", 60)
        assert await cache.get("k") is None
    finally:
        await cache.close()
