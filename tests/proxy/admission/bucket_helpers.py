"""Shared by the bucket tests (a module, not conftest: conftest names clash across folders)."""

from __future__ import annotations

import uuid

from infra.redis.server import RedisServer
from proxy.limits.redis_buckets import RedisBuckets


def redis_buckets(server: RedisServer, **kw) -> RedisBuckets:
    """A RedisBuckets on a fresh key prefix. Contract tests use a generous timeout: they test
    the shared semantics, and the fixture checks that no call fell back."""
    kw.setdefault("pods", 1)
    kw.setdefault("timeout_s", 2.0)
    kw.setdefault("key_prefix", f"t:{uuid.uuid4().hex[:8]}:")
    return RedisBuckets.from_url(server.url, **kw)
