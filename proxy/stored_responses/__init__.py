"""Stored responses of the Responses API: the ``ResponseStore`` port, its rules, and three adapters.

``port``         ``StoredResponse``, ``ResponseStore``, ``readable`` (who may read a record)
``memory``       ``MemoryResponses``: in-process, bounded (tests, and a pod without a configured store)
``sqlite_store`` ``SqliteResponses``: a SQLite file, batched writes on a thread of its own (embedded, ``--workers``)
``sql``          ``SqlResponses``: any SQLAlchemy URL (PostgreSQL); the same table
``redis_store``  ``RedisResponses``: shared by every pod through Redis (distributed mode)
``behind``       ``WriteBehind``: any of them, written off the answer's path (what a pod runs)
"""

from proxy.stored_responses.memory import MemoryResponses
from proxy.stored_responses.port import ResponseStore, StoredResponse, readable


def store_at(url: str, *, only_writer: bool = False) -> ResponseStore:
    """The adapter for ``stored_responses.url``: a ``sqlite:///`` file gets ``SqliteResponses`` (written on the
    event loop when this process is its ``only_writer``), any other URL (PostgreSQL) ``SqlResponses``."""
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        from proxy.stored_responses.sqlite_store import SqliteResponses

        return SqliteResponses(url.removeprefix("sqlite:///"), inline=only_writer)
    from proxy.stored_responses.sql import SqlResponses

    return SqlResponses(url)


__all__ = ["MemoryResponses", "ResponseStore", "StoredResponse", "readable", "store_at"]
