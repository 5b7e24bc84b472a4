"""One ``store`` fixture per ``ResponseStore`` adapter for the contract suite: in-process, a SQLite file, a real
PostgreSQL and a real redis-server (SQLite twice: through SQLAlchemy, and batched on its own thread)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from infra.postgres.server import PostgresServer
from infra.redis.server import RedisServer
from proxy.stored_responses import MemoryResponses, ResponseStore
from proxy.stored_responses.behind import WriteBehind
from proxy.stored_responses.redis_store import RedisResponses
from proxy.stored_responses.sql import SqlResponses
from proxy.stored_responses.sqlite_store import SqliteResponses
from tests.harness import start_redis


@pytest.fixture(scope="session")
def responses_redis() -> Iterator[RedisServer]:
    server = start_redis()
    yield server
    server.cleanup()


@pytest.fixture(scope="session")
def responses_pg() -> Iterator[PostgresServer]:
    with PostgresServer() as server:  # fails, never skips, if PostgreSQL cannot start
        yield server


@pytest.fixture(params=["memory", "sqlite", "sqlite-batched", "sqlite-inline", "postgres", "redis", "behind"])
async def store(request, tmp_path) -> AsyncIterator[ResponseStore]:
    adapter: ResponseStore
    if request.param == "memory":
        adapter = MemoryResponses()
    elif request.param == "sqlite":
        adapter = SqlResponses(f"sqlite:///{tmp_path / 'responses.sqlite'}")
    elif request.param == "behind":  # written behind the answers, over the batched SQLite store
        adapter = WriteBehind(SqliteResponses(tmp_path / "responses.sqlite"), miss_wait_s=0.0)
    elif request.param == "sqlite-inline":
        adapter = SqliteResponses(tmp_path / "responses.sqlite", inline=True, checkpoint_every=2, sweep_every=2)
    elif request.param == "sqlite-batched":
        adapter = SqliteResponses(tmp_path / "responses.sqlite")
    elif request.param == "postgres":
        adapter = SqlResponses(request.getfixturevalue("responses_pg").url)
    else:
        server = request.getfixturevalue("responses_redis")
        adapter = RedisResponses.from_url(server.url, key_prefix=f"t:{uuid.uuid4().hex[:8]}:")
    yield adapter
    await adapter.close()
