"""Fixtures for the rate-limit tests: a real redis-server (started here, never skipped)
and one ``buckets`` fixture per adapter for the contract suite."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

import pytest
from bucket_helpers import redis_buckets

from infra.redis.server import RedisServer
from proxy.limits import MemoryBuckets
from proxy.limits.redis_buckets import RedisBuckets
from tests.harness import start_redis


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = start_redis()
    yield server
    server.cleanup()


@pytest.fixture
def make_redis_server() -> Iterator[Callable[..., RedisServer]]:
    """A server of the test's own (to stop, pause or restart); cleaned up after the test."""
    servers: list[RedisServer] = []

    def factory(port: int | None = None) -> RedisServer:
        server = start_redis(port)
        servers.append(server)
        return server

    yield factory
    for server in servers:
        server.cleanup()


@pytest.fixture(params=["memory", "redis"])
async def buckets(request) -> AsyncIterator[MemoryBuckets | RedisBuckets]:
    if request.param == "memory":
        adapter: MemoryBuckets | RedisBuckets = MemoryBuckets()
        yield adapter
        await adapter.close()
        return
    adapter = redis_buckets(request.getfixturevalue("redis_server"))
    yield adapter
    fell_back = adapter.metrics["redis_fallback_total"]
    await adapter.close()
    assert fell_back == 0, "a contract test was answered by the local fallback, not Redis"
