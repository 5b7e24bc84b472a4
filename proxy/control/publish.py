"""How snapshots travel from the control plane to pods: two small ports.

``SnapshotFeed`` is what a pod follows: the latest (version, content hash)
and the document of a version. Embedded mode: the config database itself
(``ConfigDB.head`` is a primary-key read of the version counter; several
gateway processes sharing one SQLite file poll it). Distributed mode: a
consumer of the compacted ``fb.config`` topic implements the same two calls.

``SnapshotPublisher`` is told about every committed change. Embedded: the
commit of the head row *is* the publication, so ``DatabasePublisher`` does
nothing more; a Kafka adapter will produce the document to ``fb.config``
keyed by ``snapshot`` (compaction keeps the latest).
"""

from __future__ import annotations

from typing import Any, Protocol


class SnapshotFeed(Protocol):
    def head(self) -> tuple[int, str] | None: ...

    def document(self, version: int) -> dict[str, Any]: ...


class SnapshotPublisher(Protocol):
    def publish(self, version: int, document: dict[str, Any]) -> None: ...


class DatabasePublisher:
    """Embedded: pods poll the database head; nothing to send."""

    def publish(self, version: int, document: dict[str, Any]) -> None:
        return None
