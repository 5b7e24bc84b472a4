"""The caches' ports: ``CachePort`` (exact answers under opaque keys) and ``VectorStore`` (answers by meaning).

``CachePort`` contract (``tests/proxy/cache/test_cache_contract.py`` runs it on every adapter):

* ``get`` returns exactly the bytes last ``put`` under the key, or None once
  the entry's TTL has passed, it was evicted, or it was never stored;
* a ``put`` replaces what the key held;
* keys never collide across adapters' callers: callers hash everything that
  identifies an answer into the key (``proxy.cache.policy``);
* a cache that cannot be reached is a miss and a skipped store, never a
  failed request: adapters swallow their own I/O errors (and log them).

``VectorStore`` contract (``tests/proxy/cache/test_vector_contract.py``):

* ``nearest`` scores every live entry of the namespace (and of no other) with
  ``proxy.cache.similarity.similarity`` and returns the best score, with the
  entry's bytes only when ``is_hit(score, threshold)``; None for a namespace
  with no live entry;
* an entry is served until its TTL passes; a namespace keeps at most
  ``max_per_namespace`` entries (the one nearest its expiry leaves first), so
  a lookup scans a bounded set;
* as above, an unreachable store is a miss and a skipped store, never an error.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol, runtime_checkable


@runtime_checkable
class CachePort(Protocol):
    async def get(self, key: str) -> bytes | None: ...

    async def put(self, key: str, value: bytes, ttl_s: float) -> None: ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Match:
    """The namespace's most similar entry: its similarity, and its bytes when that is a hit."""

    similarity: float
    value: bytes | None


@runtime_checkable
class VectorStore(Protocol):
    async def nearest(self, namespace: str, vector: array, threshold: Decimal) -> Match | None: ...

    async def add(self, namespace: str, vector: array, value: bytes, ttl_s: float) -> None: ...

    async def close(self) -> None: ...
