"""``BodyStore``: sealed body rows in their own database (SQLite file, or PostgreSQL by URL).

One row per request: ``request_id`` (primary key), ``team``, ``created_at``
(UTC), ``sealed`` (the ``TeamCipher`` blob; never plaintext). Its own
database, apart from the config database, so bodies never enter snapshots,
config backups or the audit log. Blocking calls: the shell runs them in a
thread. The table is created when the store opens (it has no other schema).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

import sqlalchemy as sa

_META = sa.MetaData()
BODIES = sa.Table(
    "body_log", _META,
    sa.Column("request_id", sa.String(64), primary_key=True),
    sa.Column("team", sa.String(200), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, index=True),
    sa.Column("sealed", sa.LargeBinary, nullable=False),
)


@dataclass(frozen=True, slots=True)
class SealedRow:
    request_id: str
    team: str
    created_at: datetime
    sealed: bytes


class BodyStore:
    __slots__ = ("engine",)

    def __init__(self, url: str) -> None:
        self.engine = sa.create_engine(url, future=True)
        _META.create_all(self.engine)

    def add(self, rows: Sequence[SealedRow]) -> None:
        """Insert rows; a request id already stored keeps its first row (a retried write changes nothing)."""
        if not rows:
            return
        with self.engine.begin() as conn:
            seen = set(conn.scalars(sa.select(BODIES.c.request_id).where(
                BODIES.c.request_id.in_([r.request_id for r in rows]))))
            fresh = {r.request_id: r for r in rows if r.request_id not in seen}
            if fresh:
                conn.execute(BODIES.insert(), [{"request_id": r.request_id, "team": r.team,
                                                "created_at": r.created_at, "sealed": r.sealed}
                                               for r in fresh.values()])

    def get(self, request_id: str) -> SealedRow | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(BODIES).where(BODIES.c.request_id == request_id)).first()
        if row is None:
            return None
        at = row.created_at if row.created_at.tzinfo else row.created_at.replace(tzinfo=timezone.utc)
        return SealedRow(row.request_id, row.team, at, bytes(row.sealed))

    def delete_before(self, cutoff: datetime) -> int:
        """Delete every row created before ``cutoff``; how many went."""
        with self.engine.begin() as conn:
            return conn.execute(BODIES.delete().where(BODIES.c.created_at < cutoff)).rowcount or 0

    def count(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.scalar(sa.select(sa.func.count()).select_from(BODIES)) or 0)

    def close(self) -> None:
        self.engine.dispose()
