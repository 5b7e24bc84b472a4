"""Fixtures for the EventLog contract suite: one ``LogFactory`` per adapter.

A factory opens a log over the same medium each time it is called (same file,
same in-memory store), so tests can close and "reopen" it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from streams.eventlog import EventLog
from streams.memory_log import MemoryEventLog, MemoryLogStore
from streams.sqlite_log import SqliteEventLog

LogFactory = Callable[[], EventLog]


@pytest.fixture(params=["sqlite", "memory"])
async def open_log(request, tmp_path) -> AsyncIterator[LogFactory]:
    opened: list[EventLog] = []
    store = MemoryLogStore()

    def factory() -> EventLog:
        log: EventLog
        if request.param == "sqlite":
            log = SqliteEventLog.open(tmp_path / "events.db")
        else:
            log = MemoryEventLog(store)
        opened.append(log)
        return log

    yield factory
    for log in opened:
        await log.close()
