"""A real PostgreSQL for the config-database tests: started once per session, never skipped."""

from __future__ import annotations

from typing import Iterator

import pytest

from infra.postgres.server import PostgresServer


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    with PostgresServer() as server:  # raises (the test fails) if it cannot start
        yield server
