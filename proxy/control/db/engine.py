"""Engines for the config database: SQLite (embedded default) and PostgreSQL.

SQLite: WAL, a busy timeout, and ``BEGIN IMMEDIATE`` for write transactions
so several gateway processes sharing one file serialise their writes instead
of failing on a lock upgrade; the pods' version poll runs in a plain
deferred transaction. PostgreSQL: short connect timeout and pre-ping, so a
stopped server turns into a fast, clear ``ControlUnavailable`` (503) rather
than a hung admin call.
"""

from __future__ import annotations

import fcntl
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import sqlalchemy as sa
from sqlalchemy import event

READONLY = "fb_readonly"


def make_engine(url: str, connect_timeout_s: float = 2.0) -> sa.Engine:
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(url, connect_args={"timeout": 30}, pool_pre_ping=False)

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
            dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: sa.Connection) -> None:
            conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get(READONLY) else "BEGIN IMMEDIATE")

        return engine
    if parsed.get_backend_name() == "postgresql" and parsed.drivername == "postgresql":
        url = parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    return sa.create_engine(url, pool_pre_ping=True, pool_size=2, max_overflow=4,
                            connect_args={"connect_timeout": max(1, int(connect_timeout_s))})


@contextmanager
def migration_lock(engine: sa.Engine) -> Iterator[None]:
    """One process migrates and seeds at a time (several pods may start together)."""
    if engine.dialect.name == "sqlite":
        db = engine.url.database
        if not db or db == ":memory:":
            yield
            return
        with open(f"{db}.lock", "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
        return
    with engine.connect() as conn:
        conn.exec_driver_sql("SELECT pg_advisory_lock(725001)")
        conn.commit()
        try:
            yield
        finally:
            conn.exec_driver_sql("SELECT pg_advisory_unlock(725001)")
            conn.commit()
