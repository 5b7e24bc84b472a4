"""The response caches: when to use them (``policy``), their keys and entries, their ports and adapters.

The exact cache: ``CachePort`` has two adapters held to one contract suite,
``MemoryCache`` (an in-process LRU, embedded mode) and ``RedisCache`` (shared
by every pod, distributed mode). ``Flights`` makes identical concurrent
misses on one pod share one upstream call.

The semantic cache: ``VectorStore`` keeps answers with the unit vector of the
question that fetched them, per namespace; ``MemoryVectors`` (embedded) and
``RedisVectors`` (distributed) are held to one contract suite, and
``similarity`` holds the arithmetic and the hit rule both use.
"""

from proxy.cache.flights import Flights
from proxy.cache.memory import MemoryCache
from proxy.cache.port import CachePort, Match, VectorStore
from proxy.cache.vector_memory import MemoryVectors

__all__ = ["CachePort", "Flights", "Match", "MemoryCache", "MemoryVectors", "VectorStore"]
