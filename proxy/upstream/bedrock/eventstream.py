"""AWS event-stream framing (``application/vnd.amazon.eventstream``) -> the events dialects translate.

A message is a prelude (total length, headers length: two big-endian uint32, then the CRC32 of those 8 bytes),
the headers, the payload and the CRC32 of everything before it (the running CRC continued from the prelude's).
``EventStreamParser`` walks the frames over a ``memoryview`` of what has arrived, checks both CRCs (zlib's
``crc32``) and the lengths against botocore's limits, and names each message: an ``event`` message becomes
``SSEEvent(event=<:event-type>, data=payload)``, an ``exception`` / ``error`` message
``SSEEvent(event="exception:<:exception-type>", data=payload)``. Header values are decoded by botocore's own
``EventStreamHeaderParser`` (typed values, duplicate names refused), once per distinct header block: a
provider sends a handful (one per event type). A message whose checksum or lengths are wrong is the
provider's broken stream: ``UpstreamUnavailable``.

Why not botocore's ``EventStreamBuffer`` itself: it does the same walk in a dozen Python calls per message
(2.8 us a message, three times the SSE parser's, most of what a Bedrock stream cost farebox beyond the
OpenAI dialect's); ``tests/proxy/upstream/test_bedrock_eventstream.py`` holds this parser to it, message for
message, over streams split anywhere and corrupted anywhere.
"""

from __future__ import annotations

from struct import Struct
from zlib import crc32

from botocore.eventstream import _MAX_HEADERS_LENGTH, _MAX_PAYLOAD_LENGTH, EventStreamHeaderParser, ParserError

from proxy.errors import UpstreamUnavailable
from proxy.upstream.base import SSEEvent

EXCEPTION = "exception:"
PRELUDE = 12  # total length, headers length, prelude CRC
_PRELUDE = Struct(">III")
_CRC = Struct(">I")
_KNOWN_HEADERS_MAX = 64
_known: dict[bytes, dict] = {}  # header block -> decoded headers (a block is read only after its CRCs passed)


def _headers(raw: bytes) -> dict:
    headers = _known.get(raw)
    if headers is None:
        try:
            headers = EventStreamHeaderParser().parse(raw)
        except (ParserError, ValueError, UnicodeDecodeError) as exc:
            raise _broken(type(exc).__name__) from None
        if len(_known) < _KNOWN_HEADERS_MAX:
            _known[raw] = headers
    return headers


def _broken(why: str) -> UpstreamUnavailable:
    return UpstreamUnavailable(f"The provider sent a broken event-stream message ({why}).", upstream_status=200)


class EventStreamParser:
    """A ``FrameParser`` over AWS event-stream bytes, fed as they arrive (split anywhere)."""

    __slots__ = ("_data",)

    def __init__(self) -> None:
        self._data = b""

    def feed(self, data: bytes) -> list[SSEEvent]:
        if not data:
            return []
        buf = self._data + data if self._data else bytes(data)
        view = memoryview(buf)
        out: list[SSEEvent] = []
        at, end = 0, len(buf)
        while end - at >= PRELUDE:
            total, headers_len, prelude_crc = _PRELUDE.unpack_from(buf, at)
            crc = crc32(view[at:at + 8])
            if crc != prelude_crc:
                raise _broken("ChecksumMismatch")
            if headers_len > _MAX_HEADERS_LENGTH:
                raise _broken("InvalidHeadersLength")
            payload_len = total - PRELUDE - headers_len - 4
            if payload_len > _MAX_PAYLOAD_LENGTH:
                raise _broken("InvalidPayloadLength")
            if payload_len < 0:
                raise _broken("InvalidLength")
            if end - at < total:
                break
            body_end = at + total - 4
            if crc32(view[at + 8:body_end], crc) != _CRC.unpack_from(buf, body_end)[0]:
                raise _broken("ChecksumMismatch")
            headers = _headers(buf[at + PRELUDE:at + PRELUDE + headers_len])
            payload = buf[at + PRELUDE + headers_len:body_end]
            out.append(_event(headers, payload))
            at += total
        self._data = buf[at:]
        return out

    def close(self) -> list[SSEEvent]:
        return []  # a partial message at the end of the body is cut short: the translator is not done


def _event(headers: dict, payload: bytes) -> SSEEvent:
    text = payload.decode("utf-8", errors="replace")
    kind = headers.get(":message-type")
    if kind in ("exception", "error"):
        name = headers.get(":exception-type") or headers.get(":error-code") or "unknownException"
        return SSEEvent(event=EXCEPTION + str(name), data=text)
    return SSEEvent(event=str(headers.get(":event-type") or ""), data=text)
