"""farebox's event-stream parser against botocore's ``EventStreamBuffer``: the same messages from the same
bytes, whatever the split, and the same verdict on bytes corrupted anywhere."""

from __future__ import annotations

import pytest
from botocore.eventstream import EventStreamBuffer, ParserError
from hypothesis import given, settings
from hypothesis import strategies as st

from infra.simulator.aws_auth import event, exception
from proxy.errors import UpstreamUnavailable
from proxy.upstream.bedrock.eventstream import EXCEPTION, EventStreamParser

KINDS = ["messageStart", "contentBlockStart", "contentBlockDelta", "contentBlockStop", "messageStop", "metadata"]
message = st.one_of(
    st.tuples(st.sampled_from(KINDS), st.binary(max_size=300)).map(lambda m: event(m[0], m[1])),
    st.tuples(st.sampled_from(["throttlingException", "modelStreamErrorException"]),
              st.binary(max_size=100)).map(lambda m: exception(m[0], m[1])),
)


def botocore_says(raw: bytes) -> list[tuple[str, str]] | str:
    buffer = EventStreamBuffer()
    buffer.add_data(raw)
    out = []
    try:
        for m in buffer:
            kind = m.headers.get(":message-type")
            name = (EXCEPTION + m.headers[":exception-type"] if kind == "exception"
                    else m.headers.get(":event-type"))
            out.append((name, m.payload.decode("utf-8", errors="replace")))
    except ParserError:
        return "broken"
    return out


def farebox_says(raw: bytes, cuts: list[int] = ()) -> list[tuple[str, str]] | str:
    parser, out, start = EventStreamParser(), [], 0
    try:
        for cut in [*sorted(set(cuts)), len(raw)]:
            out += parser.feed(raw[start:cut])
            start = cut
    except UpstreamUnavailable:
        return "broken"
    return [(e.event, e.data) for e in out]


@settings(max_examples=200, deadline=None)
@given(messages=st.lists(message, min_size=1, max_size=8), data=st.data())
def test_the_same_messages_as_botocore_however_the_bytes_arrive(messages, data):
    raw = b"".join(messages)
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=20))
    assert farebox_says(raw, cuts) == botocore_says(raw) != "broken"
    assert len(farebox_says(raw)) == len(messages)


@settings(max_examples=300, deadline=None)
@given(messages=st.lists(message, min_size=1, max_size=4), data=st.data())
def test_the_same_verdict_as_botocore_on_a_corrupted_byte(messages, data):
    raw = bytearray(b"".join(messages))
    at = data.draw(st.integers(0, len(raw) - 1))
    raw[at] ^= data.draw(st.integers(1, 255))
    theirs = botocore_says(bytes(raw))
    ours = farebox_says(bytes(raw))
    if theirs == "broken":
        assert ours == "broken"
    else:  # a length grew past what arrived: both wait for more, having passed the same messages on
        assert ours == theirs


@pytest.mark.parametrize("field", ["headers", "payload"])
def test_lengths_past_botocores_limits_are_a_broken_stream(field):
    import struct
    import zlib

    headers_len, total = (200_000, 200_016) if field == "headers" else (0, 30_000_000)
    prelude = struct.pack(">II", total, headers_len)
    raw = prelude + struct.pack(">I", zlib.crc32(prelude))
    assert farebox_says(raw) == "broken" == botocore_says(raw)
