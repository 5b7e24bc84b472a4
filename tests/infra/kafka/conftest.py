"""The session's real Kafka broker (one per test run, shared with tests/streams)."""

from __future__ import annotations

import pytest

from infra.kafka.broker import KafkaBroker
from tests.infra.kafka.support import session_broker


@pytest.fixture(scope="session")
def kafka_broker() -> KafkaBroker:
    return session_broker()


from tests.kafka_leaks import absorb_kafka_leaks  # noqa: E402,F401 (autouse fixture)
