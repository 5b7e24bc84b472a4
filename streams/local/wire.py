"""The frames between ``farebox serve --workers N``'s owner process and its gateway processes.

One Unix socket per owner; each gateway process opens one connection. A
frame is a 4-byte big-endian length and one JSON object (orjson). Messages,
by their ``t``:

gateway -> owner
    ``hello`` (``pod``): the first frame, naming the gateway's pod id;
    ``ev`` (``n``, ``e``: an event as ``ledger.codec.to_dict``): append it;
    ``flush`` (``n``): answer once everything this connection sent is durable;
    ``read`` (``n``, ``after``, ``limit``): durable events of the log;
    ``rows`` (``n``, ``scopes``): the projection rows of these scopes;
    ``call`` (``n``, ``name``, ``args``): one of the owner's handlers (the idempotency store).

owner -> gateway
    ``ack`` (``n``, ``o``: the offset; or ``err``: why the log refused it);
    ``done`` (``n``, with ``events`` for a read, ``rows`` for rows, ``result`` or ``err`` for a call);
    ``grant`` (``e``): a ``lease.granted`` for this gateway's pod.

Every request frame carries a number ``n`` unique on its connection, echoed
by its answer; frames on one connection are handled in the order they came
(an append is taken at once; an answer that needs I/O may come later).
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import orjson

_LEN = struct.Struct(">I")
MAX_FRAME = 64 * 1024 * 1024  # a read of many events is the largest frame
MAX_PENDING = 512  # frames that may wait for company before they are written


class WireError(Exception):
    """The peer sent something that is not a frame (or one too large)."""


def frame(message: dict[str, Any]) -> bytes:
    body = orjson.dumps(message)
    return _LEN.pack(len(body)) + body


class FrameProtocol(asyncio.Protocol):
    """One connection's frames, as an ``asyncio.Protocol``: every complete frame in the bytes that arrived is
    handed to ``frame_received`` at once (no ``await`` per frame), and ``send`` coalesces the frames of one
    event-loop turn into one write. ``frame_received`` may raise ``WireError``: the connection is closed.
    ``closed`` is called once, with why (None: the peer ended it cleanly)."""

    def __init__(self, coalesce_s: float = 0.0) -> None:
        self.transport: asyncio.Transport | None = None
        self.coalesce_s = coalesce_s
        self._buffer = bytearray()
        self._pending: list[bytes] = []
        self._soon = False  # a flush is scheduled for this loop turn
        self._timer: asyncio.TimerHandle | None = None  # ... or after ``coalesce_s``
        self._why: BaseException | None = None

    # --- what a subclass does with frames ---------------------------------------------

    def frame_received(self, message: dict[str, Any]) -> None:
        raise NotImplementedError

    def closed(self, why: BaseException | None) -> None:
        """The connection is gone."""

    # --- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio.Transport

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        pos, end = 0, len(buffer)
        try:
            while end - pos >= _LEN.size:
                (size,) = _LEN.unpack_from(buffer, pos)
                if size > MAX_FRAME:
                    raise WireError(f"a frame of {size} bytes is over the limit of {MAX_FRAME}")
                if end - pos - _LEN.size < size:
                    break
                body = bytes(buffer[pos + _LEN.size:pos + _LEN.size + size])
                pos += _LEN.size + size
                self.frame_received(_message(body))
                if self.transport is None or self.transport.is_closing():
                    return
        except WireError as exc:
            self.abort(exc)
            return
        except (KeyError, TypeError, ValueError) as exc:  # a frame missing a field or of the wrong shape
            self.abort(WireError(f"a frame could not be handled: {type(exc).__name__}: {exc}"))
            return
        del buffer[:pos]

    def connection_lost(self, exc: Exception | None) -> None:
        why = self._why or exc
        if why is None and self._buffer:
            why = WireError("the connection ended inside a frame")
        self.transport = None
        self.closed(why)

    # --- sending ----------------------------------------------------------------------

    def send(self, message: dict[str, Any], urgent: bool = True) -> None:
        """Queue a frame: ``urgent`` ones (someone waits for them) go at the end of this loop turn, with
        everything queued before them; the others wait up to ``coalesce_s`` for company (fewer writes, and
        fewer wake-ups of the peer), or until ``MAX_PENDING`` frames are queued."""
        self._pending.append(frame(message))
        if urgent or self.coalesce_s <= 0 or len(self._pending) >= MAX_PENDING:
            if not self._soon:
                self._soon = True
                asyncio.get_running_loop().call_soon(self._flush)
        elif self._timer is None and not self._soon:
            self._timer = asyncio.get_running_loop().call_later(self.coalesce_s, self._flush)

    def send_now(self, message: dict[str, Any]) -> None:
        """Write the frame (after everything queued) before returning: once this returns, the frame is in
        the kernel's socket buffer and reaches the peer even if this process is killed next."""
        self._pending.append(frame(message))
        self._flush()

    def _flush(self) -> None:
        self._soon = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending, self._pending = self._pending, []
        if pending and self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(pending))

    def close(self) -> None:
        """Send what is pending, then end the connection."""
        self._flush()
        if self.transport is not None:
            self.transport.close()

    def abort(self, why: BaseException) -> None:
        self._why = why
        if self.transport is not None:
            self.transport.abort()


def _message(body: bytes) -> dict[str, Any]:
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise WireError(f"a frame is not JSON: {exc}") from None
    if not isinstance(message, dict) or not isinstance(message.get("t"), str):
        raise WireError("a frame is not an object with a type 't'")
    return message
