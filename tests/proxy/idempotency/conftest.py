"""One ``store`` fixture per adapter for the idempotency contract suite; Redis is a real redis-server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from infra.redis.server import RedisServer
from proxy.idempotency import MemoryIdempotency
from proxy.idempotency.redis_store import RedisIdempotency
from tests.harness import start_redis


@pytest.fixture(scope="session")
def idem_redis() -> Iterator[RedisServer]:
    server = start_redis()
    yield server
    server.cleanup()


@pytest.fixture(params=["memory", "redis"])
async def store(request) -> AsyncIterator[MemoryIdempotency | RedisIdempotency]:
    if request.param == "memory":
        adapter: MemoryIdempotency | RedisIdempotency = MemoryIdempotency()
    else:
        server = request.getfixturevalue("idem_redis")
        adapter = RedisIdempotency.from_url(server.url, key_prefix=f"t:{uuid.uuid4().hex[:8]}:")
    yield adapter
    await adapter.close()
