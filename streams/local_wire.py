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
by its answer; frames on one connection are handled in order.
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


async def read_frame(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    """The next frame, or None at a clean end of stream."""
    try:
        head = await reader.readexactly(_LEN.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise WireError("the connection ended inside a frame's length") from None
        return None
    (size,) = _LEN.unpack(head)
    if size > MAX_FRAME:
        raise WireError(f"a frame of {size} bytes is over the limit of {MAX_FRAME}")
    try:
        body = await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        raise WireError("the connection ended inside a frame") from None
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise WireError(f"a frame is not JSON: {exc}") from None
    if not isinstance(message, dict) or not isinstance(message.get("t"), str):
        raise WireError("a frame is not an object with a type 't'")
    return message


class FrameWriter:
    """Frames written in one ``write`` per event-loop turn: many appends in a turn cost one system call."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self._pending: list[bytes] = []

    def send(self, message: dict[str, Any]) -> None:
        if not self._pending:
            asyncio.get_running_loop().call_soon(self._flush)
        self._pending.append(frame(message))

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        if pending and not self.writer.is_closing():
            self.writer.write(b"".join(pending))

    async def drain(self) -> None:
        self._flush()
        await self.writer.drain()

    def close(self) -> None:
        self._flush()
        self.writer.close()
