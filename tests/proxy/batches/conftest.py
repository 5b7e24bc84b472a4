"""One ``store`` fixture per ``BatchStore`` adapter for the contract suite: a SQLite file and a real PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from infra.postgres.server import PostgresServer
from proxy.batches.sql_store import SqlBatches


@pytest.fixture(scope="session")
def batches_pg() -> Iterator[PostgresServer]:
    with PostgresServer() as server:  # fails, never skips, if PostgreSQL cannot start
        yield server


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request, tmp_path) -> AsyncIterator[SqlBatches]:
    if request.param == "sqlite":
        adapter = SqlBatches(f"sqlite:///{tmp_path / 'batches.sqlite'}")
    else:
        adapter = SqlBatches(request.getfixturevalue("batches_pg").url)
    adapter.team = f"t{uuid.uuid4().hex[:8]}"  # type: ignore[attr-defined]  # the server is shared: own rows
    yield adapter
    await adapter.close()
