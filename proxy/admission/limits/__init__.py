"""Token-aware rate limits: pure bucket math, the ``Buckets`` port and its adapters.

``bucket``         exact integer token buckets (no clock, no I/O)
``port``           ``BucketSpec``, ``Reservation``, ``Buckets`` protocol
``memory``         ``MemoryBuckets``: embedded mode, and Redis's fallback
``redis_buckets``  ``RedisBuckets``: atomic Lua over Redis, local fallback at
                   limit // pods (import it only in distributed mode: it needs redis-py)
``errors``         ``LimitsError`` and its hierarchy
"""

from proxy.admission.limits.bucket import BucketSpec, BucketState
from proxy.admission.limits.errors import BackendError, InvalidBucket, LimitsError
from proxy.admission.limits.memory import MemoryBuckets
from proxy.admission.limits.port import Buckets, Reservation

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
