"""``RedisCache``: the distributed-mode cache, shared by every pod through Redis.

An entry is the string ``{prefix}{key}`` set with ``PX`` (Redis expires it by
itself; ``maxmemory-policy`` decides eviction). Reads and writes have a short
socket timeout: a slow or unreachable Redis is a miss and a skipped store,
logged, never a failed request (the answer is simply fetched upstream).
"""

from __future__ import annotations

import logging

import redis.asyncio as aioredis
from redis.exceptions import RedisError

log = logging.getLogger("farebox.proxy")


class RedisCache:
    __slots__ = ("client", "prefix")

    def __init__(self, client: aioredis.Redis, key_prefix: str = "fb:cache:") -> None:
        self.client = client
        self.prefix = key_prefix

    @classmethod
    def from_url(cls, url: str, key_prefix: str = "fb:cache:", timeout_s: float = 0.05) -> "RedisCache":
        return cls(aioredis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s),
                   key_prefix)

    async def get(self, key: str) -> bytes | None:
        try:
            return await self.client.get(self.prefix + key)
        except (RedisError, OSError) as exc:
            log.warning("response cache read skipped: %s", type(exc).__name__)
            return None

    async def put(self, key: str, value: bytes, ttl_s: float) -> None:
        if ttl_s <= 0:
            return
        try:
            await self.client.set(self.prefix + key, value, px=max(1, int(ttl_s * 1000)))
        except (RedisError, OSError) as exc:
            log.warning("response cache write skipped: %s", type(exc).__name__)

    async def close(self) -> None:
        await self.client.aclose()
