"""SSEParser against the spec's framing rules and every recorded fixture split at random."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from upstream_wire import FIXTURES, events, translate, wire

from proxy.errors import UpstreamError, UpstreamUnavailable
from proxy.upstream.base import SSEEvent
from proxy.upstream.dialects import DIALECTS
from proxy.upstream.sse import DONE, SSEParser, encode_chunk, encode_comment

STREAMS = sorted(p.name for p in FIXTURES.glob("*.sse"))


def test_fixtures_exist():
    assert len(STREAMS) >= 8


def test_multi_line_data_event_field_and_comments():
    raw = b": ping\n\nevent: message_stop\ndata: line one\ndata:line two\ndata\n\nid: 7\nretry: 10\n\n"
    assert events(raw) == [SSEEvent("message_stop", "line one\nline two\n")]


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_all_line_endings_frame_the_same(newline):
    raw = newline.join([b"event: a", b"data: x", b"", b"data: y", b"", b""])
    assert events(raw) == [SSEEvent("a", "x"), SSEEvent(None, "y")]


def test_crlf_split_between_cr_and_lf_is_one_line_end():
    parser = SSEParser()
    assert parser.feed(b"data: x\r") == []
    assert parser.feed(b"\n\r") == [SSEEvent(None, "x")]
    assert parser.feed(b"\ndata: y\r\n\r\n") == [SSEEvent(None, "y")]


def test_utf8_sequence_split_across_feeds():
    raw = "data: 世界 🌍\n\n".encode()
    parser = SSEParser()
    out = [e for i in range(len(raw)) for e in parser.feed(raw[i : i + 1])]
    assert out == [SSEEvent(None, "世界 🌍")]


def test_leading_bom_is_stripped_once():
    assert events("\ufeffdata: a\n\n".encode()) == [SSEEvent(None, "a")]


def test_event_without_data_is_not_dispatched_and_resets_type():
    assert events(b"event: lonely\n\ndata: x\n\n") == [SSEEvent(None, "x")]


def test_close_flushes_an_unterminated_event_and_drops_nothing_else():
    parser = SSEParser()
    assert parser.feed(b"data: [DONE]") == []
    assert parser.close() == [SSEEvent(None, "[DONE]")]
    assert SSEParser().close() == []


def test_endless_line_is_refused():
    parser = SSEParser(max_line_bytes=8)
    parser.feed(b"data: 12")
    with pytest.raises(UpstreamUnavailable):
        parser.feed(b"345")


def test_encoders():
    chunk = {"choices": [{"delta": {"content": "é"}}]}
    raw = encode_chunk(chunk)
    assert raw.startswith(b"data: ") and raw.endswith(b"\n\n")
    assert orjson.loads(events(raw)[0].data) == chunk
    assert DONE == b"data: [DONE]\n\n"
    assert events(DONE) == [SSEEvent(None, "[DONE]")]
    assert encode_comment("keep\nalive") == b": keep alive\n\n"
    assert events(encode_comment("hb")) == []


def _dialect(name: str) -> str:
    return max((d for d in DIALECTS if name.startswith(d + "_")), key=len)


def _run(name: str, cuts=()):
    """Translated chunks, or the error class, for a fixture fed at ``cuts``."""
    try:
        return translate(_dialect(name), wire(name), cuts)[0]
    except UpstreamError as exc:
        return type(exc)


@pytest.mark.parametrize("name", STREAMS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_chunk_splits_give_the_same_events_and_chunks(name, data):
    raw = wire(name)
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=40))
    assert events(raw, cuts) == events(raw)
    assert _run(name, cuts) == _run(name)


@pytest.mark.parametrize("name", STREAMS)
def test_crlf_transcripts_translate_identically(name):
    raw = wire(name)
    crlf = raw.replace(b"\n", b"\r\n")
    assert events(crlf, range(0, len(crlf), 7)) == events(raw)


class _General(SSEParser):
    """The parser without its fast paths: every feed through ``_feed_any``, every line through ``_any_line``."""

    def _feed_lf(self, data: bytes) -> list[SSEEvent]:
        return self._feed_any(data)

    def _line(self, raw: bytes, out: list[SSEEvent]) -> None:
        self._any_line(raw, out)


_PIECES = [b"data: ", b"data:", b"data:  two", b"event: e", b": c", b"id: 1", b"retry: 5", b"x", b"\xc3\xa9",
           b"\xe2\x82", b"\xac", b"\xff", b"\xef\xbb\xbf", b"[DONE]", b"{}", b"\n", b"\n", b"\r", b"\r\n"]


def _parsed(parser: SSEParser, raw: bytes, cuts: list[int]) -> list[SSEEvent]:
    bounds = sorted({0, len(raw), *cuts})
    out: list[SSEEvent] = []
    for a, b in zip(bounds, bounds[1:]):
        out += parser.feed(raw[a:b])
    return out + parser.close()


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=60), st.data())
def test_the_fast_paths_give_the_general_paths_events(pieces, data):
    raw = b"".join(pieces)
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=12))
    assert _parsed(SSEParser(), raw, cuts) == _parsed(_General(), raw, cuts)


def test_the_fast_path_refuses_an_endless_line_too():
    parser = SSEParser(max_line_bytes=10)
    parser.feed(b"data: 1234")
    with pytest.raises(UpstreamUnavailable):
        parser.feed(b"56789")


async def test_a_burst_read_at_once_yields_its_first_chunk_before_translating_the_rest():
    """A whole stream in one read: the first chunk is ready with the rest left untranslated, then all of it."""
    from proxy.upstream.relay import UpstreamStream

    class Body:
        def __init__(self, parts):
            self.parts = list(parts)

        async def readany(self):
            return self.parts.pop(0) if self.parts else b""

        def at_eof(self):
            return not self.parts

    class Response:
        closed = False

        def __init__(self, parts):
            self.content = Body(parts)

        def release(self):
            pass

        def close(self):
            pass

    raw = wire("openai_text.sse")
    tr = _dialect("openai_text.sse")
    stream = UpstreamStream(DIALECTS[tr].stream_translator(), float("inf"), response=Response([raw]))
    await stream.read_first()
    assert len(stream.first) == 1 and stream.pending  # the role chunk; the rest still pending
    rest = [c async for batch in stream.chunks() if batch for c in batch]
    whole = translate("openai", raw)[0]
    assert stream.first + rest == whole and stream.translator.done


async def test_a_completed_streams_body_end_is_read_before_its_connection_goes_back():
    """The provider's last event, then the end of the chunked body in a read of its own: the stream is complete
    at the last event, and its connection is released to the pool once the body's end is read (not closed: a
    connection released with unread body would be dropped); a stream cut short is closed at once."""
    import asyncio

    from proxy.upstream.relay import _DRAINING, UpstreamStream

    class Body:
        def __init__(self, parts):
            self.parts = list(parts)

        async def readany(self):
            await asyncio.sleep(0)
            return self.parts.pop(0) if self.parts else b""

        def at_eof(self):
            return not self.parts

    class Response:
        closed = False

        def __init__(self, parts):
            self.content = Body(parts)
            self.ended = None

        def release(self):
            self.ended = "released"

        def close(self):
            self.ended = "closed"

    raw = wire("openai_text.sse")
    done = Response([raw, b"0\r\n\r\n"])  # the stream completes before the body has ended
    stream = UpstreamStream(DIALECTS[_dialect("openai_text.sse")].stream_translator(), float("inf"), response=done)
    await stream.read_first()
    [c async for c in stream.chunks()]
    assert stream.translator.done and done.ended is None and _DRAINING  # draining in the background
    await asyncio.gather(*_DRAINING)
    assert done.ended == "released" and not done.content.parts
    cut = Response([raw[: len(raw) // 2], b""])
    stream = UpstreamStream(DIALECTS[_dialect("openai_text.sse")].stream_translator(), float("inf"), response=cut)
    await stream.read_first()
    stream.close()
    assert cut.ended == "closed"
