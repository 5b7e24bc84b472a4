"""Idempotent retries: the ``IdempotencyStore`` port, its pure rules, and two adapters.

``port``    ``IdempotencyStore``, ``Record``, ``Claim``; the pure rules (header check,
            body fingerprint, what a claim means for a request)
``memory``  ``MemoryIdempotency``: embedded mode (one process)
``redis_store`` ``RedisIdempotency``: distributed mode, shared by pods (import it only
            there: it needs redis-py)
``owner``   ``OwnerIdempotency``: ``serve --workers N``, the owner process's store over a call
"""

from proxy.idempotency.memory import MemoryIdempotency
from proxy.idempotency.port import Claim, IdempotencyStore, Record, StoredAnswer

__all__ = ["Claim", "IdempotencyStore", "MemoryIdempotency", "Record", "StoredAnswer"]
