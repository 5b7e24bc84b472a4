"""``CachePort``: opaque answers under opaque keys, each with a time to live.

Contract (``tests/proxy/cache/test_cache_contract.py`` runs it on every adapter):

* ``get`` returns exactly the bytes last ``put`` under the key, or None once
  the entry's TTL has passed, it was evicted, or it was never stored;
* a ``put`` replaces what the key held;
* keys never collide across adapters' callers: callers hash everything that
  identifies an answer into the key (``proxy.cache.keys``);
* a cache that cannot be reached is a miss and a skipped store, never a
  failed request: adapters swallow their own I/O errors (and log them).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class CachePort(Protocol):
    async def get(self, key: str) -> bytes | None: ...

    async def put(self, key: str, value: bytes, ttl_s: float) -> None: ...

    async def close(self) -> None: ...
