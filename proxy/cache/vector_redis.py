"""``RedisVectors``: the distributed-mode semantic store, shared by every pod through Redis.

A namespace is three keys under ``{prefix}{namespace}``:

* ``:v`` a hash, entry id -> its expiry (8 bytes, big-endian ms since the
  epoch) and its float32 vector (``proxy.cache.similarity.pack``);
* ``:a`` a hash, entry id -> the stored answer's bytes;
* ``:t`` a sorted set, entry id scored by its expiry.

``add`` is one Lua script (atomic): store the entry, drop the namespace's
expired entries, then the ones nearest expiry while there are more than
``max_per_namespace``, and keep the three keys alive for the longest TTL
stored (an idle namespace vanishes by itself). ``nearest`` reads the ``:v``
hash whole (``HGETALL``) and scores it here, on the pod (``vector_memory.scan``), then fetches the best
entry's answer only when it is a hit. That bounded scan (at most
``max_per_namespace`` vectors, 1.5 KB each at 384 dimensions) is the
design at this scale: Redis has no vector index without a module, and
scoring in Lua would block Redis for every pod. Reads and writes have a
short socket timeout; a slow or unreachable Redis is a miss and a skipped
store, logged, never a failed request.
"""

from __future__ import annotations

import logging
import secrets
import time
from array import array
from decimal import Decimal
from typing import Callable

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from proxy.cache.port import Match
from proxy.cache.similarity import is_hit, pack, unpack
from proxy.cache.vector_memory import DEFAULT_MAX_PER_NAMESPACE, scan

log = logging.getLogger("farebox.proxy")

_ADD = """
local now, ttl, most = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[3], now + ttl, ARGV[1])
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
local extra = redis.call('ZCARD', KEYS[3]) - #gone - most
if extra > 0 then
  for _, id in ipairs(redis.call('ZRANGE', KEYS[3], #gone, #gone + extra - 1)) do gone[#gone + 1] = id end
end
if #gone > 0 then
  redis.call('HDEL', KEYS[1], unpack(gone))
  redis.call('HDEL', KEYS[2], unpack(gone))
  redis.call('ZREM', KEYS[3], unpack(gone))
end
for i = 1, 3 do
  if redis.call('PTTL', KEYS[i]) < ttl then redis.call('PEXPIRE', KEYS[i], ttl) end
end
return #gone
"""


class RedisVectors:
    __slots__ = ("client", "prefix", "max_per_namespace", "clock", "_add")

    def __init__(self, client: aioredis.Redis, key_prefix: str = "fb:semantic:", max_per_namespace: int = DEFAULT_MAX_PER_NAMESPACE,
                 clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.prefix = key_prefix
        self.max_per_namespace = max_per_namespace
        self.clock = clock  # wall clock: pods compare expiries written by each other
        self._add = client.register_script(_ADD)

    @classmethod
    def from_url(cls, url: str, key_prefix: str = "fb:semantic:", max_per_namespace: int = DEFAULT_MAX_PER_NAMESPACE,
                 timeout_s: float = 0.05) -> "RedisVectors":
        client = aioredis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        return cls(client, key_prefix, max_per_namespace)

    def _keys(self, namespace: str) -> tuple[str, str, str]:
        base = self.prefix + namespace
        return f"{base}:v", f"{base}:a", f"{base}:t"

    async def nearest(self, namespace: str, vector: array, threshold: Decimal) -> Match | None:
        vectors, answers, _ = self._keys(namespace)
        try:
            stored = await self.client.hgetall(vectors)
        except (RedisError, OSError) as exc:
            log.warning("semantic cache read skipped: %s", type(exc).__name__)
            return None
        found = await scan(vector, _live(stored, int(self.clock() * 1000)))
        if found is None:
            return None
        entry_id, score = found
        if not is_hit(score, threshold):
            return Match(score, None)
        try:
            value = await self.client.hget(answers, entry_id)
        except (RedisError, OSError) as exc:
            log.warning("semantic cache read skipped: %s", type(exc).__name__)
            return None
        return Match(score, value) if value is not None else None

    async def add(self, namespace: str, vector: array, value: bytes, ttl_s: float) -> None:
        if ttl_s <= 0:
            return
        now_ms, ttl_ms = int(self.clock() * 1000), max(1, int(ttl_s * 1000))
        packed = (now_ms + ttl_ms).to_bytes(8, "big") + pack(vector)
        try:
            await self._add(keys=self._keys(namespace),
                            args=[secrets.token_hex(8), packed, value, now_ms, ttl_ms, self.max_per_namespace])
        except (RedisError, OSError) as exc:
            log.warning("semantic cache write skipped: %s", type(exc).__name__)

    async def close(self) -> None:
        await self.client.aclose()


def _live(stored: dict[bytes, bytes], now_ms: int):  # type: ignore[no-untyped-def]
    """(id, vector) of every entry not yet expired; an entry that does not read as one is skipped."""
    for entry_id, raw in stored.items():
        if len(raw) < 8 or int.from_bytes(raw[:8], "big") <= now_ms:
            continue
        try:
            yield entry_id, unpack(raw[8:])
        except ValueError:
            continue
