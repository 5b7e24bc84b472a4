"""One ``store`` fixture per adapter for the idempotency contract suite (SQLite: a file in the test's folder); Redis is a real redis-server, the
owner's store (``serve --workers N``) a real hub over a real socket."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from zoneinfo import ZoneInfo

import pytest

from infra.redis.server import RedisServer
from ledger.leases import LeasePolicy
from ledger.local_processor import LocalProcessor
from proxy.idempotency import IdempotencyStore, MemoryIdempotency
from proxy.idempotency.owner import OwnerIdempotency, handlers
from proxy.idempotency.redis_store import RedisIdempotency
from proxy.idempotency.sqlite_store import SqliteIdempotency
from streams.local.hub import LocalHub
from streams.local.log import LocalEventLog
from streams.sqlite_log import SqliteEventLog
from tests.harness import start_redis


@pytest.fixture(scope="session")
def idem_redis() -> Iterator[RedisServer]:
    server = start_redis()
    yield server
    server.cleanup()


@pytest.fixture(params=["memory", "sqlite", "redis", "owner"])
async def store(request, tmp_path) -> AsyncIterator[IdempotencyStore]:
    hub = None
    adapter: IdempotencyStore
    if request.param == "memory":
        adapter = MemoryIdempotency()
    elif request.param == "sqlite":
        adapter = SqliteIdempotency(tmp_path / "idempotency.sqlite")
    elif request.param == "owner":  # `serve --workers N`: the owner's store, over its socket
        hub = LocalHub(tmp_path / "owner.sock", SqliteEventLog.open(tmp_path / "events.sqlite"),
                       LocalProcessor(ZoneInfo("UTC"), lambda s: None, lambda s: 80, lambda: "INR", LeasePolicy()),
                       handlers=handlers(MemoryIdempotency()))
        await hub.start()
        log = await LocalEventLog.connect(tmp_path / "owner.sock", "pod-idem")
        adapter = OwnerIdempotency(log.call)
    else:
        server = request.getfixturevalue("idem_redis")
        adapter = RedisIdempotency.from_url(server.url, key_prefix=f"t:{uuid.uuid4().hex[:8]}:")
    yield adapter
    await adapter.close()
    if hub is not None:
        await log.close()
        await hub.close()
        await hub.events.close()
