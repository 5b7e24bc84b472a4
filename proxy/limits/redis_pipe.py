"""One pipelined connection to Redis whose timeout measures Redis, not this process.

Why not redis-py on this path: a redis-py call is a task that takes a pool
connection, writes, then reads over several event-loop steps, so a timer
started around it also counts the time the call waits behind everything else
a busy loop is running; a busy pod then falls back to its local buckets
although Redis answered in microseconds.

Here the calls made in one loop tick are written together, in one pipelined
write (Redis answers them in order), and each write arms one timer at write
time + timeout. Replies are parsed inside the protocol's ``data_received``,
with no further loop step, by ``hiredis.Reader`` (the C parser redis-py uses
for ``redis[hiredis]``), which returns error replies as ``ReplyError`` values
rather than raising them, so one refused call leaves the replies after it in
step; commands are encoded by ``hiredis.pack_command``. When a timer finds
calls unanswered, it first asks the kernel whether bytes are waiting in our
socket that the loop, busy elsewhere, has not read yet; if so, the verdict
waits for the loop to read them (asyncio and uvloop order timers and I/O
differently, so neither order is relied on). A call times out only if Redis
had not answered by the time the timer could look.

Connecting is lazy (the first call, or the first after a drop) and bounded by
``connect_timeout_s``; the setup (AUTH, SELECT, SCRIPT LOAD of the scripts) is
pipelined ahead of the first calls, and a refused setup drops the connection
like a connection error. A connection whose oldest unanswered call is older
than ``stale_s`` is dropped and made again (a redis-py socket timeout did the
same). Replies of calls that timed out or were cancelled are read and
discarded, so the connection stays in step.

TLS (``rediss://``): ``Address.tls`` holds the client context, built by
``redis_buckets.address_of`` from the URL's ``ssl_*`` options exactly as
redis-py builds its own, and the handshake is part of the bounded connect; a
failed handshake is a connection error like a refused connect.
"""

from __future__ import annotations

import asyncio
import hashlib
import select
import ssl
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import hiredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

_SETUP = object()  # a reply slot of the connection setup: an error reply drops the connection
_IGNORED = object()  # a reply slot nobody waits for (SCRIPT LOAD before a retried EVALSHA)
_INCOMPLETE = object()  # what the reader gives while no whole reply is buffered
# Callbacks an expiring timer defers its verdict by while unread bytes wait: at least one I/O poll
# comes between two of them on asyncio (next iteration) and on uvloop (next idle pass).
_RECHECKS = 3


class ReplyError(ResponseError):
    """An error reply (``-NOSCRIPT ...``), returned by the reader as a value; raised by the call."""


@dataclass(frozen=True, slots=True)
class Address:
    host: str = "127.0.0.1"
    port: int = 6379
    path: str | None = None  # a unix socket instead of host:port
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: ssl.SSLContext | None = field(default=None, repr=False, compare=False)  # a rediss:// URL

    def __str__(self) -> str:  # for log lines and errors: never the password
        where = self.path or f"{self.host}:{self.port}"
        return f"{where} (TLS)" if self.tls is not None else where


def encode(args: tuple[Any, ...]) -> bytes:
    """A command in RESP (an array of bulk strings)."""
    return hiredis.pack_command(args)


def reader() -> hiredis.Reader:
    """A RESP reader: bytes as bytes, error replies as ``ReplyError`` values, ``_INCOMPLETE``
    while no whole reply is buffered, and a malformed stream raised as a connection error."""
    return hiredis.Reader(protocolError=RedisConnectionError, replyError=ReplyError, notEnoughData=_INCOMPLETE)


class _Protocol(asyncio.Protocol):
    def __init__(self, pipe: RedisPipe) -> None:
        self.pipe = pipe
        self.reader = reader()

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while self.pipe._proto is self:  # a reply may drop the connection (a refused setup)
            try:
                value = self.reader.gets()
            except RedisConnectionError as exc:
                self.pipe._drop(RedisConnectionError(f"unreadable reply from Redis: {exc}"))
                return
            if value is _INCOMPLETE:
                break
            self.pipe._reply(value)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.pipe._proto is self:
            self.pipe._drop(RedisConnectionError(f"Redis closed the connection ({exc or 'EOF'})"))


@dataclass(slots=True)
class _Call:
    command: bytes
    future: Any  # an asyncio.Future, or _IGNORED
    timeout_s: float


class RedisPipe:
    """Calls to one Redis, batched per loop tick, each bounded by ``timeout_s`` from its write."""

    def __init__(self, address: Address, *, timeout_s: float, scripts: tuple[str, ...] = (),
                 connect_timeout_s: float = 1.0, stale_s: float = 1.0) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.stale_s = stale_s
        self.scripts = {hashlib.sha1(s.encode()).hexdigest(): s for s in scripts}
        self.writes = 0  # pipelined writes (one per tick with calls)
        self.calls = 0
        self._queue: list[_Call] = []
        self._flush_handle: asyncio.Handle | None = None
        self._transport: asyncio.Transport | None = None
        self._proto: _Protocol | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._unsent: list[_Call] = []  # flushed while connecting
        self._replies: deque[tuple[Any, float]] = deque()  # (future or marker, write time), in order

    async def call(self, *args: Any, timeout_s: float | None = None) -> Any:
        """The reply; raises ``TimeoutError``, redis ``ConnectionError`` or ``ResponseError``."""
        reply = await self._submit(encode(args), timeout_s)
        if isinstance(reply, ReplyError):
            raise reply
        return reply

    async def evalsha(self, sha: str, keys: list[str], args: list[int]) -> Any:
        """EVALSHA of one of ``scripts``; on NOSCRIPT (a flushed or restarted Redis) load it and retry once."""
        command = encode(("EVALSHA", sha, len(keys), *keys, *args))
        reply = await self._submit(command, None)
        if isinstance(reply, ReplyError) and str(reply).startswith("NOSCRIPT"):
            self._enqueue(_Call(encode(("SCRIPT", "LOAD", self.scripts[sha])), _IGNORED, 0.0))
            reply = await self._submit(command, None)  # written right after the load, in the same batch
        if isinstance(reply, ReplyError):
            raise reply
        return reply

    async def close(self) -> None:
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        if self._connecting is not None:
            self._connecting.cancel()
            await asyncio.gather(self._connecting, return_exceptions=True)
        closed = RedisConnectionError("the rate-limit pipe to Redis is closed")
        self._drop(closed)
        for call in self._queue:
            _fail(call.future, closed)
        self._queue.clear()

    # -- batching and timers -----------------------------------------------------------

    def _submit(self, command: bytes, timeout_s: float | None) -> asyncio.Future[Any]:
        future = asyncio.get_running_loop().create_future()
        self._enqueue(_Call(command, future, timeout_s if timeout_s is not None else self.timeout_s))
        return future

    def _enqueue(self, call: _Call) -> None:
        self._queue.append(call)
        if self._flush_handle is None:  # the first call of this tick: write them all at the next one
            self._flush_handle = asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_handle = None
        batch = [c for c in self._queue if c.future is _IGNORED or not c.future.done()]  # not cancelled
        self._queue = []
        if not batch:
            return
        loop = asyncio.get_running_loop()
        now = time.monotonic()  # not loop.time(): uvloop's is the time the loop iteration began
        if self._transport is not None and self._replies and now - self._replies[0][1] > self.stale_s:
            self._drop(RedisConnectionError(f"Redis left a call unanswered for over {self.stale_s:.1f} s"))
        for timeout_s in {c.timeout_s for c in batch if c.future is not _IGNORED}:
            futures = [c.future for c in batch if c.timeout_s == timeout_s and c.future is not _IGNORED]
            loop.call_later(timeout_s, self._expire, futures, now + timeout_s, timeout_s)  # harmless once done
        if self._transport is None:  # the timers run from now: connecting is Redis's time too
            self._unsent += batch
            if self._connecting is None:
                self._connecting = loop.create_task(self._connect())
            return
        self._write(batch)

    def _write(self, batch: list[_Call]) -> None:
        assert self._transport is not None
        batch = [c for c in batch if c.future is _IGNORED or not c.future.done()]
        if not batch:
            return
        self._transport.write(b"".join(c.command for c in batch))
        sent = time.monotonic()
        self._replies.extend((c.future, sent) for c in batch)
        self.writes += 1
        self.calls += len(batch)

    def _expire(self, futures: list[asyncio.Future[Any]], deadline: float, timeout_s: float, rechecks: int = 0) -> None:
        pending = [f for f in futures if not f.done()]
        if not pending:
            return
        loop = asyncio.get_running_loop()
        left = deadline - time.monotonic()
        if left > 0:  # a timer armed from a loop clock that lagged (uvloop's) came early
            loop.call_later(left, self._expire, pending, deadline, timeout_s, rechecks)
            return
        if rechecks < _RECHECKS and self._unread():  # answered while we were busy: let the loop read it
            loop.call_soon(self._expire, pending, deadline, timeout_s, rechecks + 1)
            return
        unsent = {c.future for c in self._unsent}  # still waiting for the connection (or TLS handshake)
        for future in pending:
            _fail(future, TimeoutError(
                f"no connection to Redis at {self.address} within {timeout_s * 1000:.0f} ms" if future in unsent
                else f"no answer from Redis within {timeout_s * 1000:.0f} ms of the write"))

    def _unread(self) -> bool:
        """Bytes (or EOF) wait in our socket that the loop has not read yet."""
        sock = self._transport.get_extra_info("socket") if self._transport is not None else None
        if sock is None:
            return False
        try:
            poller = select.poll()  # not select.select: a busy gateway's descriptors pass FD_SETSIZE
            poller.register(sock.fileno(), select.POLLIN)
            return bool(poller.poll(0))
        except (OSError, ValueError):
            return False

    # -- the connection ----------------------------------------------------------------

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        a = self.address
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                if a.path:
                    transport, proto = await loop.create_unix_connection(lambda: _Protocol(self), a.path)
                else:
                    transport, proto = await loop.create_connection(lambda: _Protocol(self), a.host, a.port, ssl=a.tls)
        except (OSError, TimeoutError) as exc:
            unsent, self._unsent = self._unsent, []
            error = RedisConnectionError(f"could not connect to Redis at {a}: {exc or type(exc).__name__}")
            for call in unsent:
                _fail(call.future, error)
            return
        finally:
            self._connecting = None
        self._transport, self._proto = transport, proto  # type: ignore[assignment]
        setup: list[tuple[Any, ...]] = []
        if a.password is not None:
            setup.append(("AUTH", a.username, a.password) if a.username else ("AUTH", a.password))
        if a.db:
            setup.append(("SELECT", a.db))
        setup += [("SCRIPT", "LOAD", script) for script in self.scripts.values()]
        if setup:
            self._transport.write(b"".join(encode(cmd) for cmd in setup))
            self._replies.extend((_SETUP, time.monotonic()) for _ in setup)
        unsent, self._unsent = self._unsent, []
        self._write(unsent)

    def _reply(self, value: Any) -> None:
        if not self._replies:
            self._drop(RedisConnectionError(f"a reply from Redis to no call: {str(value)[:80]}"))
            return
        slot, _ = self._replies.popleft()
        if slot is _SETUP:
            if isinstance(value, ReplyError):
                self._drop(RedisConnectionError(f"Redis refused the connection setup: {value}"))
        elif slot is not _IGNORED and not slot.done():
            slot.set_result(value)

    def _drop(self, error: Exception) -> None:
        """Forget the connection; every call waiting on it (or for it) fails with ``error``."""
        transport, self._transport, self._proto = self._transport, None, None
        if transport is not None:
            transport.abort()
        waiting, self._replies = self._replies, deque()
        unsent, self._unsent = self._unsent, []
        for slot, _ in waiting:
            if slot is not _SETUP and slot is not _IGNORED:
                _fail(slot, error)
        for call in unsent:
            if call.future is not _IGNORED:
                _fail(call.future, error)


def _fail(future: Any, error: Exception) -> None:
    if future is not _IGNORED and not future.done():
        future.set_exception(error)
