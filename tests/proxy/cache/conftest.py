"""One ``cache`` fixture per adapter for the response-cache contract suite; Redis is a real redis-server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from infra.redis.server import RedisServer, RedisServerError
from proxy.cache import MemoryCache
from proxy.cache.redis_cache import RedisCache


@pytest.fixture(scope="session")
def cache_redis() -> Iterator[RedisServer]:
    try:
        server = RedisServer().start()
    except RedisServerError as exc:  # a Redis test must fail, not skip, without Redis
        pytest.fail(f"could not start redis-server for the cache tests: {exc}", pytrace=False)
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
