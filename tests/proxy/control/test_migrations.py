"""Alembic migrations upgrade an empty database to head and downgrade to empty, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from infra.postgres.server import PostgresServer
from proxy.control.db import migrate
from proxy.control.db.engine import make_engine
from proxy.control.db.models import Base


def _roundtrip(url: str) -> None:
    engine = make_engine(url)
    try:
        assert migrate.current(engine) is None
        migrate.upgrade(engine)
        assert migrate.current(engine) == migrate.head()
        tables = set(sa.inspect(engine).get_table_names())
        assert set(Base.metadata.tables) <= tables
        # the migrated schema is the models' schema: every column is there
        insp = sa.inspect(engine)
        for name, table in Base.metadata.tables.items():
            assert {c["name"] for c in insp.get_columns(name)} == set(table.columns.keys()), name
        migrate.downgrade(engine)
        assert migrate.current(engine) is None
        assert set(sa.inspect(engine).get_table_names()) <= {"alembic_version"}
        migrate.upgrade(engine)  # and up again from empty
        assert migrate.current(engine) == migrate.head()
    finally:
        engine.dispose()


def test_sqlite_upgrade_from_empty_and_downgrade(tmp_path: Path) -> None:
    _roundtrip(f"sqlite:///{tmp_path / 'control.sqlite'}")


@pytest.mark.postgres
def test_postgres_upgrade_from_empty_and_downgrade(postgres: PostgresServer) -> None:
    _roundtrip(postgres.create_database("migrations"))
