"""Fixtures for the provider simulator tests: an in-process server per test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp.test_utils import TestClient, TestServer

from infra.simulator.app import create_app
from infra.simulator.config import SimulatorConfig, parse_config

MakeSim = Callable[..., Awaitable[TestClient]]


@pytest.fixture
async def make_sim() -> AsyncIterator[MakeSim]:
    """``await make_sim(config_dict_or_SimulatorConfig)`` -> a started TestClient (closed after the test)."""
    clients: list[TestClient] = []

    async def factory(config: dict | SimulatorConfig | None = None) -> TestClient:
        cfg = config if isinstance(config, SimulatorConfig) else parse_config(config or {})
        client = TestClient(TestServer(create_app(cfg)))
        await client.start_server()
        clients.append(client)
        return client

    yield factory
    for client in clients:
        await client.close()


@pytest.fixture
async def sim(make_sim: MakeSim) -> TestClient:
    return await make_sim()
