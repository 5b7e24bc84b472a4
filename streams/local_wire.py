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

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._pending: list[bytes] = []
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

    def send(self, message: dict[str, Any]) -> None:
        if not self._pending:
            asyncio.get_running_loop().call_soon(self._flush)
        self._pending.append(frame(message))

    def _flush(self) -> None:
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
