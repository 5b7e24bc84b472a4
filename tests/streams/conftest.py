"""Fixtures for the EventLog contract suite: one ``LogFactory`` per adapter.

A factory opens a log over the same medium each time it is called (same file,
same in-memory store), so tests can close and "reopen" it.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from zoneinfo import ZoneInfo

import pytest

from infra.kafka.broker import KafkaBroker
from infra.kafka.topics import TopicSpec, create_topics
from ledger.leases import LeasePolicy
from ledger.local_processor import LocalProcessor
from streams.eventlog import EventLog
from streams.kafka.log import KafkaEventLog
from streams.local.hub import LocalHub
from streams.local.log import LocalEventLog
from streams.memory_log import MemoryEventLog, MemoryLogStore
from streams.sqlite_log import SqliteEventLog
from tests.infra.kafka.support import session_broker

LogFactory = Callable[[], EventLog]


@pytest.fixture(scope="session")
def kafka_broker() -> KafkaBroker:
    """The session's real Kafka broker (started once, from the Maven jars)."""
    return session_broker()


@pytest.fixture(params=["sqlite", "memory", "kafka", "local"])
async def open_log(request, tmp_path) -> AsyncIterator[LogFactory]:
    opened: list[EventLog] = []
    store = MemoryLogStore()
    topic = ""
    hub = None
    if request.param == "local":
        # a gateway process's log under `serve --workers N`: the owner's SQLite log over its socket; each
        # "reopen" is a new connection to the same owner. Its hold sweeper is held off: the contract's events
        # are dated in the past, and a test slower than the 1 s sweep (CI, loaded) saw the owner append their
        # expiries in between (offsets 1,950-3,249 of a test expecting 1-2,000)
        hub = LocalHub(tmp_path / "owner.sock", SqliteEventLog.open(tmp_path / "events.db"),
                       LocalProcessor(ZoneInfo("UTC"), lambda scope: None, lambda scope: 80, lambda: "INR",
                                      LeasePolicy()), sweep_interval_s=3600.0)
        await hub.start()
    if request.param == "kafka":
        # every event type routed to one fresh one-partition topic: the log's read view (see kafka_log)
        broker = request.getfixturevalue("kafka_broker")
        topic = f"contract-{uuid.uuid4().hex[:12]}"
        await create_topics(broker.bootstrap, [TopicSpec(topic, partitions=1)])

    def factory() -> EventLog:
        log: EventLog
        if request.param == "sqlite":
            log = SqliteEventLog.open(tmp_path / "events.db")
        elif request.param == "local":
            log = LocalEventLog.open(tmp_path / "owner.sock", "pod-contract")
        elif request.param == "kafka":
            log = KafkaEventLog(broker.bootstrap, tmp_path / "spool", requests_topic=topic,
                                scope_topic=topic, config_topic=topic)
        else:
            log = MemoryEventLog(store)
        opened.append(log)
        return log

    yield factory
    for log in opened:
        await log.close()
    if hub is not None:
        await hub.close()
        await hub.events.close()


from tests.kafka_leaks import absorb_kafka_leaks  # noqa: E402,F401 (autouse fixture)
