"""The owner side of ``farebox serve --workers N``: one SQLite log and one ledger processor for every gateway.

The owner process holds what has one writer: the SQLite event log and the
``ledger.local_processor.LocalProcessor`` (every scope's lease ledger). Its
gateway processes connect to a Unix socket (``streams.local.wire``) and send
their events; the hub appends each to the log and acknowledges it with its
offset once durable, so a gateway's ``Recorder`` works as over any log.

Invariants:

* the processor folds the log in offset order: an acknowledgement folds its
  event when it is the next offset; one past a hole (an event another
  process appended: ``farebox rerate --apply``) leaves the hole to
  ``catch_up``, which reads the log and folds in order (run every sweep too);
* what the processor decides (grants, soft notices, expiries) is appended to
  the log like any event, and changes nothing when it comes back; a grant is
  also sent at once to the gateway that asked (its ``pod``): if the owner dies
  before the grant is durable, the restarted processor decides the same
  grant again from the same log;
* a gateway that disconnects (killed) keeps nothing: its holds expire after
  their TTL and its leases after theirs (``LocalProcessor.due``), charged as
  the distributed worker charges a dead pod's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ledger.codec import from_dict, to_dict
from ledger.events import Event, LeaseGranted
from ledger.local_processor import LocalProcessor
from streams.eventlog import StreamsError
from streams.local.wire import FrameProtocol, WireError
from streams.sqlite_log import SqliteEventLog

log = logging.getLogger("farebox.workers")

Durable = Callable[[int, Event], None]
Reply = Callable[..., None]  # FrameProtocol.send
ACK_COALESCE_S = 0.002  # an acknowledgement waits at most this long to share a write with others...
AWAITED = frozenset({"request.settled"})  # ...except these: an answer's last byte waits for them
Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class LocalHub:
    def __init__(self, path: Path, events: SqliteEventLog, processor: LocalProcessor, *,
                 on_durable: Durable | None = None, sweep_interval_s: float = 1.0,
                 clock: Callable[[], float] = time.time, handlers: dict[str, Handler] | None = None) -> None:
        self.path = path
        self.events = events
        self.processor = processor
        self.on_durable = on_durable
        self.sweep_interval_s = sweep_interval_s
        self.clock = clock
        self.handlers = dict(handlers or {})  # ``call`` frames: name -> what the owner answers
        self.pods: dict[str, GatewayConnection] = {}
        self._tasks: set[asyncio.Future[None]] = set()  # answers being prepared, catch-ups running
        self.stats = {"events": 0, "grants": 0, "expiries": 0, "connections": 0, "disconnects": 0}
        self._server: asyncio.AbstractServer | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._catching = asyncio.Lock()

    # --- lifetime -----------------------------------------------------------------

    async def rebuild(self, page: int = 10_000) -> int:
        """Fold the whole log (start-up): the processor's state as it was; decisions are not re-sent."""
        folded = 0
        while batch := await self.events.read(after=self.processor.offset, limit=page):
            now = self.clock()
            for offset, event in batch:
                self.processor.apply(event, offset, now)
            folded += len(batch)
        self.processor.take_dirty()
        return folded

    async def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(lambda: GatewayConnection(self), path=str(self.path))
        self._sweeper = asyncio.create_task(self._sweep_forever())

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        if self._server is not None:
            self._server.close()
            for connection in list(self.pods.values()):
                connection.close()
            await self._server.wait_closed()
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        self.path.unlink(missing_ok=True)

    # --- appending ----------------------------------------------------------------

    def append(self, event: Event, reply: Reply | None = None, n: int = 0) -> None:
        """Append ``event``; once durable, fold it and (with ``reply``) acknowledge it with its offset."""
        try:
            future = self.events.append(event)
        except StreamsError as exc:
            if reply is not None:
                reply({"t": "ack", "n": n, "err": str(exc)})
            return
        future.add_done_callback(lambda f: self._durable(f, event, reply, n))

    def _durable(self, future: asyncio.Future[int], event: Event, reply: Reply | None, n: int) -> None:
        if future.cancelled() or future.exception() is not None:
            if reply is not None:
                reply({"t": "ack", "n": n, "err": str(future.exception() or "cancelled")})
            return
        offset = future.result()
        if reply is not None:  # a settlement's answer waits for its ack (Meter.durable): that one goes this turn
            reply({"t": "ack", "n": n, "o": offset}, event.type in AWAITED)
        if self.on_durable is not None:
            self.on_durable(offset, event)
        if offset == self.processor.offset + 1 and not self._catching.locked():
            self._decided(self.processor.apply(event, offset, self.clock()))
        elif offset > self.processor.offset:
            self._track(asyncio.ensure_future(self.catch_up()))

    def _decided(self, decided: list[Event]) -> None:
        for event in decided:
            if isinstance(event, LeaseGranted):
                self.stats["grants"] += 1
                connection = self.pods.get(event.pod)
                if connection is not None:
                    connection.send({"t": "grant", "e": to_dict(event)})
            self.append(event)

    async def catch_up(self, page: int = 10_000) -> None:
        """Fold whatever the log holds past the processor's offset, in order."""
        async with self._catching:
            while batch := await self.events.read(after=self.processor.offset, limit=page):
                for offset, event in batch:
                    self._decided(self.processor.apply(event, offset, self.clock()))

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_interval_s)
            try:
                if self.events.last_offset > self.processor.offset:
                    await self.catch_up()
                due = self.processor.due(datetime.fromtimestamp(self.clock(), timezone.utc))
            except Exception:  # noqa: BLE001 - a sweep that fails is tried again next interval
                log.exception("ledger sweep failed; trying again")
                continue
            self.stats["expiries"] += len(due)
            for event in due:
                self.append(event)

    # --- a gateway's connection ------------------------------------------------------

    def _connected(self, connection: "GatewayConnection", pod: str) -> None:
        self.pods[pod] = connection
        self.stats["connections"] += 1
        log.info("gateway %s connected", pod)

    def _disconnected(self, connection: "GatewayConnection", why: BaseException | None) -> None:
        pod = connection.pod
        if why is not None:
            log.warning("gateway %s: %s; connection closed", pod or "(unnamed)", why)
        if pod is None or self.pods.get(pod) is not connection:
            return
        del self.pods[pod]
        self.stats["disconnects"] += 1
        held = sum(le.pod == pod for ledger in self.processor.scopes.values() for le in ledger.open_leases())
        if held:
            log.warning("gateway %s disconnected holding %d open lease(s): they, and its open holds, "
                        "expire after their TTLs", pod, held)
        else:
            log.info("gateway %s disconnected", pod)

    def _handle(self, message: dict[str, Any], connection: "GatewayConnection") -> None:
        """One frame: an event is appended at once (order kept); an answer that needs I/O runs as a task."""
        kind, n = message["t"], message.get("n", 0)
        if kind == "ev":
            self.stats["events"] += 1
            try:
                event = from_dict(message["e"])
            except Exception as exc:  # noqa: BLE001 - never fatal: the gateway is told why
                connection.send({"t": "ack", "n": n, "err": f"not an event: {exc}"})
                return
            self.append(event, connection.send, n)
        elif kind == "rows":
            now = datetime.fromtimestamp(self.clock(), timezone.utc)
            connection.send({"t": "done", "n": n, "rows": {s: self.processor.row(s, now) for s in message["scopes"]}})
        elif kind in ("flush", "read", "call"):
            self._track(asyncio.ensure_future(self._answer(kind, n, message, connection)))
        else:
            raise WireError(f"unknown frame type {kind!r}")

    def _track(self, task: asyncio.Future[None]) -> None:
        """Keep a reference to ``task`` until it ends (the loop holds only weak ones); ``close`` waits for it."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, kind: str, n: int, message: dict[str, Any], connection: "GatewayConnection") -> None:
        try:
            if kind == "flush":  # the barrier follows every event this connection sent before it
                await self.events.flush()
                connection.send({"t": "done", "n": n})
            elif kind == "read":
                batch = await self.events.read(after=int(message.get("after", 0)),
                                               limit=int(message.get("limit", 1000)))
                connection.send({"t": "done", "n": n, "events": [[offset, to_dict(e)] for offset, e in batch]})
            else:
                handler = self.handlers.get(message.get("name", ""))
                if handler is None:
                    raise LookupError(f"the owner has no call {message.get('name')!r}")
                connection.send({"t": "done", "n": n, "result": await handler(message.get("args") or {})})
        except Exception as exc:  # noqa: BLE001 - the caller gets the reason, the owner goes on
            log.warning("%s for gateway %s failed", kind, connection.pod, exc_info=True)
            connection.send({"t": "done", "n": n, "err": f"{type(exc).__name__}: {exc}"})


class GatewayConnection(FrameProtocol):
    """One gateway process's connection to the hub: a ``hello`` naming its pod, then its frames."""

    def __init__(self, hub: LocalHub) -> None:
        super().__init__(coalesce_s=ACK_COALESCE_S)
        self.hub = hub
        self.pod: str | None = None

    def frame_received(self, message: dict[str, Any]) -> None:
        if self.pod is None:
            if message.get("t") != "hello" or not isinstance(message.get("pod"), str):
                raise WireError("the first frame is not a hello naming the pod")
            self.pod = message["pod"]
            self.hub._connected(self, message["pod"])
            return
        self.hub._handle(message, self)

    def closed(self, why: BaseException | None) -> None:
        self.hub._disconnected(self, why)
