"""How snapshots travel from the control plane to pods: two small ports.

``SnapshotFeed`` is what a pod follows: the latest (version, content hash)
and the document of a version. Embedded mode: the config database itself
(``ConfigDB.head`` is a primary-key read of the version counter; several
gateway processes sharing one SQLite file poll it). Distributed mode: a
consumer of the compacted ``fb.config`` topic implements the same two calls.

``SnapshotPublisher`` is told about every committed change. Embedded: the
commit of the head row *is* the publication, so ``DatabasePublisher`` does
nothing more. Distributed: ``streams.config_topic.KafkaSnapshotPublisher``
produces the document to ``fb.config`` keyed by ``snapshot`` (compaction
keeps the latest) in the background: ``publish`` must return at once and
never fail, because the commit has already happened and the database stays
the fallback (``proxy.control.follow`` publishes again what the topic missed).
"""

from __future__ import annotations

from typing import Any, Protocol


class SnapshotFeed(Protocol):
    def head(self) -> tuple[int, str] | None:
        """The newest (version, content hash) known, or None."""
        ...

    def document(self, version: int) -> dict[str, Any]:
        """The document of ``version``; LookupError if it is not available."""
        ...


class SnapshotPublisher(Protocol):
    def publish(self, version: int, document: dict[str, Any]) -> None:
        """Tell the pods about a committed snapshot; returns at once, never raises for transport errors."""
        ...


class DatabasePublisher:
    """Embedded: pods poll the database head; nothing to send."""

    def publish(self, version: int, document: dict[str, Any]) -> None:
        return None
