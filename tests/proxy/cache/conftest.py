"""One fixture per adapter for the caches' contract suites (``cache``: exact; ``vectors``: semantic, on a
clock the test moves); Redis is a real redis-server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from infra.redis.server import RedisServer
from proxy.cache import MemoryCache, MemoryVectors
from proxy.cache.redis_cache import RedisCache
from proxy.cache.vector_redis import RedisVectors
from tests.harness import start_redis


@pytest.fixture(scope="session")
def cache_redis() -> Iterator[RedisServer]:
    server = start_redis()
    yield server
    server.cleanup()


@pytest.fixture(params=["memory", "redis"])
async def cache(request) -> AsyncIterator[MemoryCache | RedisCache]:
    if request.param == "memory":
        adapter: MemoryCache | RedisCache = MemoryCache()
    else:
        server = request.getfixturevalue("cache_redis")
        adapter = RedisCache.from_url(server.url, key_prefix=f"t:{uuid.uuid4().hex[:8]}:", timeout_s=1.0)
    yield adapter
    await adapter.close()


class Clock:
    """Seconds the test sets; both vector stores read expiries from it."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=["memory", "redis"])
async def vectors(request, clock: Clock) -> AsyncIterator[MemoryVectors | RedisVectors]:
    if request.param == "memory":
        adapter: MemoryVectors | RedisVectors = MemoryVectors(max_per_namespace=3, clock=clock)
    else:
        server = request.getfixturevalue("cache_redis")
        adapter = RedisVectors.from_url(server.url, key_prefix=f"t:{uuid.uuid4().hex[:8]}:", max_per_namespace=3,
                                        timeout_s=1.0)
        adapter.clock = clock
    yield adapter
    await adapter.close()
