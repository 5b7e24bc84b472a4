"""One ``store`` fixture per adapter for the idempotency contract suite; Redis is a real redis-server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from infra.redis.server import RedisServer, RedisServerError
from proxy.idempotency import MemoryIdempotency
from proxy.idempotency.redis_store import RedisIdempotency


@pytest.fixture(scope="session")
def idem_redis() -> Iterator[RedisServer]:
    try:
        server = RedisServer().start()
    except RedisServerError as exc:  # a Redis test must fail, not skip, without Redis
        pytest.fail(f"could not start redis-server for the idempotency tests: {exc}", pytrace=False)
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
