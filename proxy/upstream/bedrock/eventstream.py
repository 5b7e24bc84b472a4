"""AWS event-stream framing (``application/vnd.amazon.eventstream``) -> the events dialects translate.

botocore's ``EventStreamBuffer`` decodes the binary messages (prelude, headers, payload, both CRC32 checks);
this adapter only names each one: an ``event`` message becomes ``SSEEvent(event=<:event-type>, data=payload)``
and an ``exception`` / ``error`` message ``SSEEvent(event="exception:<:exception-type>", data=payload)``.
A message whose checksum or lengths are wrong is the provider's broken stream: ``UpstreamUnavailable``.
"""

from __future__ import annotations

from botocore.eventstream import _PRELUDE_LENGTH, EventStreamBuffer, ParserError

from proxy.errors import UpstreamUnavailable
from proxy.upstream.base import SSEEvent

EXCEPTION = "exception:"
_KNOWN_HEADERS_MAX = 64


class _Buffer(EventStreamBuffer):
    """botocore's buffer, remembering what each distinct header block decodes to.

    A provider sends a handful of distinct header blocks (one per event type), yet botocore decodes every
    message's headers field by field in Python, most of the time a stream spends in it. The block is read only
    after botocore has checked the message's CRC, so a remembered block is one botocore already vouched for.
    Reaches into botocore's internals (``_parse_headers``, ``_prelude``): botocore is pinned exactly."""

    _known: dict[bytes, dict] = {}

    def _parse_headers(self) -> dict:
        raw = bytes(self._data[_PRELUDE_LENGTH:self._prelude.headers_end])
        headers = self._known.get(raw)
        if headers is None:
            headers = super()._parse_headers()
            if len(self._known) < _KNOWN_HEADERS_MAX:
                self._known[raw] = headers
        return headers


class EventStreamParser:
    """A ``FrameParser`` over AWS event-stream bytes, fed as they arrive (split anywhere)."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = _Buffer()

    def feed(self, data: bytes) -> list[SSEEvent]:
        if not data:
            return []
        self._buffer.add_data(data)
        out = []
        try:
            for message in self._buffer:
                out.append(_event(message.headers, message.payload))
        except ParserError as exc:
            raise UpstreamUnavailable(f"The provider sent a broken event-stream message ({type(exc).__name__}).",
                                      upstream_status=200) from None
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
