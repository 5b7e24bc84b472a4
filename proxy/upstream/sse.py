"""Server-sent events: an incremental parser and the encoders the relay writes.

The parser follows the WHATWG event-stream rules: lines end in ``\\n``,
``\\r\\n`` or a lone ``\\r``; ``data:`` lines of one event are joined with
``\\n``; a blank line dispatches; ``:`` lines are comments; ``id`` and
``retry`` are ignored. Bytes may arrive split anywhere (mid-line, mid-UTF-8
sequence): lines are cut on bytes first and only complete lines are decoded,
which is safe because no byte of a multi-byte UTF-8 sequence is a CR or LF.

Two fast paths give the same events as the general code (a property test
holds them equal): data with no CR is split on LF in one C call
(``_feed_lf``), and a ``data: `` line after the first is decoded past its
prefix without the field parsing (``_line``).
"""

from __future__ import annotations

import orjson

from proxy.errors import UpstreamUnavailable
from proxy.upstream.base import SSEEvent

DONE = b"data: [DONE]\n\n"

# An upstream that never ends a line would grow the buffer without bound.
MAX_LINE_BYTES = 16 * 1024 * 1024

_BOM = "\ufeff"


class SSEParser:
    """Feed raw body bytes, get complete events back in order."""

    __slots__ = ("_partial", "_pending_cr", "_data", "_event", "_started", "max_line_bytes")

    def __init__(self, *, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._partial = bytearray()  # bytes of the current, unterminated line
        self._pending_cr = False  # last byte seen was CR: a following LF belongs to it
        self._data: list[str] = []
        self._event: str | None = None
        self._started = False  # a BOM is only stripped from the very first line
        self.max_line_bytes = max_line_bytes

    def feed(self, data: bytes) -> list[SSEEvent]:
        """Events completed by ``data`` (possibly none)."""
        if not data:
            return []
        if not self._pending_cr and b"\r" not in data:
            return self._feed_lf(data)
        return self._feed_any(data)

    def _feed_any(self, data: bytes) -> list[SSEEvent]:
        """``feed`` for any data: each line's end found by a search for LF and one for CR."""
        events: list[SSEEvent] = []
        start = 0
        if self._pending_cr:
            self._pending_cr = False
            if data[:1] == b"\n":
                start = 1
        n = len(data)
        while start < n:
            lf = data.find(b"\n", start)
            cr = data.find(b"\r", start)
            if lf < 0 and cr < 0:
                self._partial += data[start:]
                if len(self._partial) > self.max_line_bytes:
                    raise UpstreamUnavailable(
                        "Upstream sent an SSE line longer than the gateway accepts."
                    )
                break
            if cr < 0 or (0 <= lf < cr):
                end, nxt = lf, lf + 1
            elif cr + 1 < n:
                end, nxt = cr, cr + 2 if data[cr + 1 : cr + 2] == b"\n" else cr + 1
            else:  # CR is the last byte: an LF may follow in the next chunk
                end, nxt = cr, cr + 1
                self._pending_cr = True
            self._partial += data[start:end]
            self._line(bytes(self._partial), events)
            self._partial.clear()
            start = nxt
        return events

    def _feed_lf(self, data: bytes) -> list[SSEEvent]:
        """``feed`` for data with no CR (what every provider sends), split on LF in C: the same events. A CR
        in an earlier feed ended its line there, so the partial line held holds none either."""
        lines = data.split(b"\n")
        rest = lines.pop()
        events: list[SSEEvent] = []
        if lines:
            if self._partial:
                lines[0] = bytes(self._partial) + lines[0]
                self._partial.clear()
            line = self._line
            for raw in lines:
                line(raw, events)
        if rest:
            self._partial += rest
            if len(self._partial) > self.max_line_bytes:
                raise UpstreamUnavailable("Upstream sent an SSE line longer than the gateway accepts.")
        return events

    def close(self) -> list[SSEEvent]:
        """End of body: dispatch an event the upstream left unterminated.

        The spec discards it; we are lenient because some OpenAI-compatible
        servers omit the final blank line after ``data: [DONE]``.
        """
        events: list[SSEEvent] = []
        if self._partial:
            self._line(bytes(self._partial), events)
            self._partial.clear()
        self._line(b"", events)
        self._pending_cr = False
        return events

    def _line(self, raw: bytes, out: list[SSEEvent]) -> None:
        if raw[:6] == b"data: " and self._started:  # the usual line: its ASCII prefix decodes the same apart
            self._data.append(raw[6:].decode("utf-8", errors="replace"))
            return
        self._any_line(raw, out)

    def _any_line(self, raw: bytes, out: list[SSEEvent]) -> None:
        line = raw.decode("utf-8", errors="replace")
        if not self._started:
            self._started = True
            if line.startswith(_BOM):
                line = line[1:]
        if not line:
            if self._data:
                out.append(SSEEvent(event=self._event, data="\n".join(self._data)))
            self._data = []
            self._event = None
            return
        if line[0] == ":":
            return  # comment / heartbeat
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value or None
        # ``id``, ``retry`` and unknown fields carry nothing we use.


def encode_chunk(obj: dict) -> bytes:
    """One ``data:`` event carrying ``obj`` as JSON."""
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def encode_comment(text: str = "") -> bytes:
    """A comment event (heartbeat); newlines in ``text`` are flattened."""
    flat = text.replace("\r", " ").replace("\n", " ")
    return b": " + flat.encode("utf-8") + b"\n\n"
