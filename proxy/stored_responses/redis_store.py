"""``RedisResponses``: stored responses shared by every pod through Redis (distributed mode).

A record is the string ``{prefix}{id}`` holding ``StoredResponse.dumps()``, written with ``SET … EXAT
expires_at``: Redis expires it by itself, so nothing needs sweeping. A store that cannot be reached raises
``StoreUnavailable`` (503): a read cannot be answered from anywhere else.
"""

from __future__ import annotations

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from proxy.errors import GatewayError
from proxy.stored_responses.port import StoredResponse


class StoreUnavailable(GatewayError):
    status = 503
    code = "response_store_unavailable"
    retryable = True


class RedisResponses:
    def __init__(self, client: aioredis.Redis, key_prefix: str = "fb:resp:") -> None:
        self.client = client
        self.prefix = key_prefix

    @classmethod
    def from_url(cls, url: str, key_prefix: str = "fb:resp:", timeout_s: float = 2.0) -> "RedisResponses":
        return cls(aioredis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s),
                   key_prefix)

    async def put(self, record: StoredResponse) -> None:
        try:
            await self.client.set(self.prefix + record.id, record.dumps(), exat=record.expires_at)
        except RedisError as exc:
            raise StoreUnavailable("The stored-response store is unavailable.") from exc

    async def get(self, response_id: str, now: float) -> StoredResponse | None:
        try:
            raw = await self.client.get(self.prefix + response_id)
        except RedisError as exc:
            raise StoreUnavailable("The stored-response store is unavailable; retry.") from exc
        if raw is None:
            return None
        record = StoredResponse.loads(raw)
        return record if record.expires_at > now else None

    async def delete(self, response_id: str) -> bool:
        try:
            return bool(await self.client.delete(self.prefix + response_id))
        except RedisError as exc:
            raise StoreUnavailable("The stored-response store is unavailable; retry.") from exc

    async def close(self) -> None:
        await self.client.aclose()
