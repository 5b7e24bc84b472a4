"""``RedisIdempotency``: idempotency records shared by every pod through Redis (distributed mode).

A slot is the string ``{prefix}{slot}`` holding ``Record.dumps()``. Claiming
is one ``SET NX PX`` (atomic across pods: of two racing claims exactly one
writes); the loser reads what the winner wrote. ``complete`` and ``release``
are Lua scripts that check the record still belongs to the request before
replacing or deleting it, so a late pod never overwrites a newer claim.
Redis expires every record by itself (PX), so nothing needs sweeping.

Unlike the rate-limit buckets there is no local fallback: a store that
cannot be reached raises ``IdempotencyUnavailable`` (503, retryable), since
answering without the shared record could bill a retry twice.
"""

from __future__ import annotations

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from proxy.errors import GatewayError
from proxy.idempotency.port import Claim, Record

# Replace the record only if it is still the pending claim of this request id.
_COMPLETE = """
local cur = redis.call('GET', KEYS[1])
if not cur then return 0 end
local rec = cjson.decode(cur)
if rec['rid'] ~= ARGV[1] or rec['state'] ~= 'pending' then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
"""

_RELEASE = """
local cur = redis.call('GET', KEYS[1])
if not cur then return 0 end
if cjson.decode(cur)['rid'] ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
"""


class IdempotencyUnavailable(GatewayError):
    status = 503
    code = "idempotency_store_unavailable"
    retryable = True


class RedisIdempotency:
    def __init__(self, client: aioredis.Redis, key_prefix: str = "fb:idem:") -> None:
        self.client = client
        self.prefix = key_prefix
        self._complete = client.register_script(_COMPLETE)
        self._release = client.register_script(_RELEASE)

    @classmethod
    def from_url(cls, url: str, key_prefix: str = "fb:idem:", timeout_s: float = 1.0) -> "RedisIdempotency":
        return cls(aioredis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s),
                   key_prefix)

    async def claim(self, slot: str, record: Record, ttl_s: float) -> Claim:
        key = self.prefix + slot
        try:
            for _ in range(3):  # the record may expire between SET NX and GET: claim again
                if await self.client.set(key, record.dumps(), nx=True, px=_ms(ttl_s)):
                    return Claim(True, record)
                found = await self.client.get(key)
                if found is not None:
                    return Claim(False, Record.loads(found))
        except RedisError as exc:
            raise _unavailable(exc) from None
        raise IdempotencyUnavailable("The idempotency store kept changing under a claim; retry shortly.",
                                     headers={"Retry-After": "1"})

    async def complete(self, slot: str, done: Record, ttl_s: float) -> bool:
        try:
            return bool(await self._complete(keys=[self.prefix + slot],
                                             args=[done.request_id, done.dumps(), _ms(ttl_s)]))
        except RedisError as exc:
            raise _unavailable(exc) from None

    async def release(self, slot: str, request_id: str) -> None:
        try:
            await self._release(keys=[self.prefix + slot], args=[request_id])
        except RedisError as exc:
            raise _unavailable(exc) from None

    async def close(self) -> None:
        await self.client.aclose()


def _ms(ttl_s: float) -> int:
    return max(1, int(ttl_s * 1000))


def _unavailable(exc: RedisError) -> IdempotencyUnavailable:
    return IdempotencyUnavailable(f"The idempotency store is unreachable ({type(exc).__name__}); retry shortly.",
                                  headers={"Retry-After": "1"})
