"""The exact response cache: when to use it (``policy``), its keys and entries, its port and adapters.

``CachePort`` has two adapters held to one contract suite: ``MemoryCache``
(an in-process LRU, embedded mode) and ``RedisCache`` (shared by every pod,
distributed mode). ``Flights`` makes identical concurrent misses on one pod
share one upstream call.
"""

from proxy.cache.flights import Flights
from proxy.cache.memory import MemoryCache
from proxy.cache.port import CachePort

__all__ = ["CachePort", "Flights", "MemoryCache"]
