"""Token-aware rate limits: pure bucket math, the ``Buckets`` port and its adapters.

``bucket``         exact integer token buckets (no clock, no I/O)
``port``           ``BucketSpec``, ``Reservation``, ``Buckets`` protocol
``memory``         ``MemoryBuckets``: embedded mode, and Redis's fallback
``redis_buckets``  ``RedisBuckets``: atomic Lua over Redis, local fallback at
                   limit // pods (import it only in distributed mode: it needs redis-py)
``redis_pipe``     ``RedisPipe``: its one pipelined connection (RESP by hiredis, TLS
                   for rediss://), calls batched per loop tick, timeout from the write
``errors``         ``LimitsError`` and its hierarchy
"""

from proxy.limits.bucket import BucketSpec, BucketState
from proxy.limits.errors import BackendError, InvalidBucket, LimitsError
from proxy.limits.memory import MemoryBuckets
from proxy.limits.port import Buckets, Reservation

__all__ = [
    "BackendError",
    "BucketSpec",
    "BucketState",
    "Buckets",
    "InvalidBucket",
    "LimitsError",
    "MemoryBuckets",
    "Reservation",
]
