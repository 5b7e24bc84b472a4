"""The ``EventLog`` of a gateway process under ``farebox serve --workers N``: the owner's log, over its socket.

A gateway process appends its events to the owner's SQLite log through the
owner's Unix socket (``streams.local.wire``, ``streams.local.hub``). The
port's contract holds as for the SQLite adapter (``tests/streams``): an
append returns at once with a future that resolves with the event's offset
once the owner has it durable; ``flush`` waits for every append of this
process; ``read`` reads the owner's log.

The socket also brings what the owner's ledger decides for this process:
``on_grant`` receives each ``lease.granted`` for this pod (the wallets'
``on_grant``), and ``rows`` answers the projection rows of scopes (the
pod's ``ScopeStates``, ``GET /admin/v1/budgets``).

Fail-stop: once the connection is lost, every append not yet acknowledged
fails with ``EventLogFailed``, later appends raise it, and ``on_lost`` is
called (the gateway process stops: without the owner it cannot record).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ledger.codec import from_dict, to_dict
from ledger.events import Event, LeaseGranted
from streams.eventlog import EventLogClosed, EventLogFailed
from streams.local.wire import FrameProtocol

log = logging.getLogger("farebox.workers")
COALESCE_S = 0.002  # an event frame waits at most this long to share a write with others
LATER, TURN, NOW = "later", "turn", "now"
# When an event is written to the owner's socket. A settlement is written before append returns, so it
# precedes the answer's bytes to the client: a caller who got a complete non-streamed answer has its
# settlement on the owner's side even if this process is killed right after. A lease request has a request
# waiting for its grant: it goes this loop turn. The others share writes (at most COALESCE_S late).
_WHEN = {"request.settled": NOW, "lease.requested": TURN}


class LocalEventLog:
    def __init__(self, path: Path | str, pod: str, *, on_grant: Callable[[LeaseGranted], None] | None = None,
                 on_lost: Callable[[], None] | None = None) -> None:
        self.path = str(path)
        self.pod = pod
        self.on_grant = on_grant
        self.on_lost = on_lost
        self._connection: _OwnerConnection | None = None
        self._connecting: asyncio.Future[None] | None = None
        self._queued: list[dict[str, Any]] = []  # sent once connected
        self._numbers = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._appends: set[asyncio.Future[int]] = set()
        self._last = 0
        self._closed = False
        self._failure: str | None = None

    @classmethod
    def open(cls, path: Path | str, pod: str, *, timeout_s: float = 30.0, **kw: Any) -> "LocalEventLog":
        """The log at once; it connects in the background (retrying while the owner starts, up to
        ``timeout_s``), and what is appended meanwhile is sent once connected."""
        self = cls(path, pod, **kw)
        self._connecting = asyncio.ensure_future(self._connect(timeout_s))
        return self

    @classmethod
    async def connect(cls, path: Path | str, pod: str, *, timeout_s: float = 30.0, **kw: Any) -> "LocalEventLog":
        """``open``, then wait for the connection; ``EventLogFailed`` if the owner did not answer."""
        self = cls.open(path, pod, timeout_s=timeout_s, **kw)
        await self._connecting
        if self._failure is not None:
            raise EventLogFailed(self._failure)
        return self

    async def _connect(self, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            try:
                _, connection = await loop.create_unix_connection(lambda: _OwnerConnection(self), self.path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if loop.time() >= deadline:
                    self._lost(f"the owner's event log socket {self.path} did not answer within {timeout_s:.0f}s")
                    return
                await asyncio.sleep(0.05)
        self._connection = connection
        connection.send({"t": "hello", "pod": self.pod})
        for message in self._queued:
            connection.send(message)
        self._queued = []

    @property
    def connected(self) -> bool:
        """Not failed and not closed (still connecting counts: what is appended then is sent once connected)."""
        return self._failure is None and not self._closed

    # --- the port -----------------------------------------------------------------

    def append(self, event: Event) -> asyncio.Future[int]:
        if self._failure is not None:
            raise EventLogFailed(f"the owner's event log is unreachable: {self._failure}")
        if self._closed:
            raise EventLogClosed("this process's event log connection is closed")
        future = self._request({"t": "ev", "e": to_dict(event)}, _WHEN.get(event.type, LATER))
        self._appends.add(future)
        future.add_done_callback(self._appended)
        return future

    def _appended(self, future: asyncio.Future[int]) -> None:
        self._appends.discard(future)
        if not future.cancelled() and future.exception() is None:
            self._last = max(self._last, future.result())

    async def flush(self) -> None:
        if self._failure is not None:
            raise EventLogFailed(f"the owner's event log is unreachable: {self._failure}")
        if self._appends:
            await asyncio.gather(*list(self._appends), return_exceptions=True)
        if self._failure is not None:
            raise EventLogFailed(f"the owner's event log is unreachable: {self._failure}")

    async def read(self, after: int = 0, limit: int = 1000) -> list[tuple[int, Event]]:
        if self._closed:
            raise EventLogClosed("this process's event log connection is closed")
        answer = await self._ask({"t": "read", "after": after, "limit": limit})
        return [(offset, from_dict(e)) for offset, e in answer["events"]]

    async def rows(self, scopes: list[str]) -> dict[str, dict[str, str]]:
        """The owner's projection rows of ``scopes`` (``streams.projections.scope_fields``'s layout)."""
        answer = await self._ask({"t": "rows", "scopes": scopes})
        return answer["rows"]

    async def read_scope(self, scope: str) -> dict[str, str]:
        return (await self.rows([scope]))[scope]

    async def call(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """One of the owner's ``handlers`` (``LocalHub``): its result, or ``EventLogFailed`` with its error."""
        answer = await self._ask({"t": "call", "name": name, "args": args})
        if "err" in answer:
            raise EventLogFailed(f"the owner's {name} failed: {answer['err']}")
        return answer["result"]

    async def close(self) -> None:
        if self._closed:
            return
        if self._connecting is not None and not self._connecting.done():
            await self._connecting
        try:
            if self._failure is None:
                await self.flush()
        finally:
            self._closed = True
            if self._connection is not None:
                self._connection.close()

    @property
    def last_offset(self) -> int:
        return self._last

    # --- internals ------------------------------------------------------------------

    def _request(self, message: dict[str, Any], when: str = TURN) -> asyncio.Future[Any]:
        n = next(self._numbers)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[n] = future
        message["n"] = n
        if self._connection is None:
            self._queued.append(message)
        elif when == NOW:
            self._connection.send_now(message)
        else:
            self._connection.send(message, urgent=when == TURN)
        return future

    async def _ask(self, message: dict[str, Any]) -> dict[str, Any]:
        if self._failure is not None:
            raise EventLogFailed(f"the owner's event log is unreachable: {self._failure}")
        return await self._request(message)

    def _received(self, message: dict[str, Any]) -> None:
        kind = message["t"]
        if kind == "grant":
            granted = from_dict(message["e"])
            if isinstance(granted, LeaseGranted) and self.on_grant is not None:
                self.on_grant(granted)
            return
        future = self._waiting.pop(message.get("n", 0), None)
        if future is None or future.done():
            return
        if kind == "ack":
            if "err" in message:
                future.set_exception(EventLogFailed(f"the owner refused an event: {message['err']}"))
            else:
                future.set_result(message["o"])
        else:
            future.set_result(message)

    def _lost(self, why: str) -> None:
        if self._closed:
            return
        self._failure = why
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(EventLogFailed(f"the owner's event log is unreachable: {why}"))
        self._waiting.clear()
        self._queued = []
        log.error("the owner process is gone (%s): this gateway process cannot record and stops", why)
        if self.on_lost is not None:
            self.on_lost()


class _OwnerConnection(FrameProtocol):
    def __init__(self, log: LocalEventLog) -> None:
        super().__init__(coalesce_s=COALESCE_S)
        self.log = log

    def frame_received(self, message: dict[str, Any]) -> None:
        self.log._received(message)

    def closed(self, why: BaseException | None) -> None:
        self.log._lost(str(why) if why is not None else "the owner closed the connection")
