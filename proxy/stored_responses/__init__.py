"""Stored responses of the Responses API: the ``ResponseStore`` port, its rules, and three adapters.

``port``         ``StoredResponse``, ``ResponseStore``, ``readable`` (who may read a record)
``memory``       ``MemoryResponses``: in-process, bounded (tests, and a pod without a configured store)
``sql``          ``SqlResponses``: a SQLite file (embedded and ``--workers``) or PostgreSQL by URL
``redis_store``  ``RedisResponses``: shared by every pod through Redis (distributed mode)
"""

from proxy.stored_responses.memory import MemoryResponses
from proxy.stored_responses.port import ResponseStore, StoredResponse, readable

__all__ = ["MemoryResponses", "ResponseStore", "StoredResponse", "readable"]
