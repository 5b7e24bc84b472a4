"""``SqlResponses``: stored responses in their own database (a SQLite file by default, PostgreSQL by URL).

One row per response: ``id`` (primary key), ``team``, ``expires_at`` (unix seconds, indexed) and ``record``
(``StoredResponse.dumps``). Its own database, apart from the config database, so conversations never enter
config backups, snapshots or the audit log. The gateway processes of ``farebox serve --workers N`` share the
file (SQLite's WAL: one writer at a time, readers alongside). Blocking calls run in a thread. Expired rows
are never returned and are swept every ``sweep_every`` writes. The table is created when the store opens.
"""

from __future__ import annotations

import asyncio
import time

import sqlalchemy as sa

from proxy.stored_responses.port import StoredResponse

_META = sa.MetaData()
RESPONSES = sa.Table(
    "stored_responses", _META,
    sa.Column("id", sa.String(96), primary_key=True),
    sa.Column("team", sa.String(200), nullable=False),
    sa.Column("expires_at", sa.BigInteger, nullable=False, index=True),
    sa.Column("record", sa.LargeBinary, nullable=False),
)


class SqlResponses:
    def __init__(self, url: str, *, sweep_every: int = 1000) -> None:
        sqlite = url.startswith("sqlite")
        self.engine = sa.create_engine(url, future=True, connect_args={"timeout": 30} if sqlite else {})
        if sqlite:
            sa.event.listen(self.engine, "connect", _wal)
        try:
            _META.create_all(self.engine)
        except sa.exc.OperationalError:  # another process of `serve --workers N` created it between check and create
            _META.create_all(self.engine)
        self.sweep_every = sweep_every
        self.writes = 0

    def _put(self, record: StoredResponse) -> None:
        row = {"id": record.id, "team": record.team, "expires_at": record.expires_at, "record": record.dumps()}
        with self.engine.begin() as conn:
            conn.execute(RESPONSES.delete().where(RESPONSES.c.id == record.id))
            conn.execute(RESPONSES.insert(), [row])
            self.writes += 1
            if self.writes % self.sweep_every == 0:
                conn.execute(RESPONSES.delete().where(RESPONSES.c.expires_at <= int(time.time())))

    def _get(self, response_id: str, now: float) -> StoredResponse | None:
        with self.engine.connect() as conn:
            raw = conn.scalar(sa.select(RESPONSES.c.record).where(RESPONSES.c.id == response_id,
                                                                  RESPONSES.c.expires_at > now))
        return None if raw is None else StoredResponse.loads(bytes(raw))

    def _delete(self, response_id: str) -> bool:
        with self.engine.begin() as conn:
            return bool(conn.execute(RESPONSES.delete().where(RESPONSES.c.id == response_id)).rowcount)

    async def put(self, record: StoredResponse) -> None:
        await asyncio.to_thread(self._put, record)

    async def get(self, response_id: str, now: float) -> StoredResponse | None:
        return await asyncio.to_thread(self._get, response_id, now)

    async def delete(self, response_id: str) -> bool:
        return await asyncio.to_thread(self._delete, response_id)

    async def close(self) -> None:
        await asyncio.to_thread(self.engine.dispose)


def _wal(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()
