"""streams.dead_letters: the headers say where a dead letter came from and why, and read back."""

from __future__ import annotations

import orjson
import pytest

from ledger.codec import decode
from streams.dead_letters import READ_ERRORS, REASON_MAX, headers, read_headers, reason_of


def test_headers_say_where_and_why_and_read_back():
    exc = ValueError("a rollup row has 1 counters,\n expected 10")
    pairs = headers("fb.rollups", 2, 1234, exc)
    assert all(isinstance(value, bytes) for _, value in pairs)
    origin = read_headers(pairs)
    assert (origin.topic, origin.partition, origin.offset) == ("fb.rollups", 2, 1234)
    assert origin.reason == "ValueError: a rollup row has 1 counters, expected 10"  # one line


def test_a_long_reason_is_cut():
    reason = reason_of(KeyError("x" * 2000))
    assert len(reason) == REASON_MAX and reason.endswith("…") and reason.startswith("KeyError: 'xxx")


@pytest.mark.parametrize("value", [b"not json", b"\xff\xfe", b"[1, 2]", b'{"type": "nope", "schema": 1}',
                                   b'{"type": "request.admitted", "schema": 1}'])
def test_what_the_codec_refuses_is_a_read_error(value):
    with pytest.raises(READ_ERRORS):
        decode(value)


def test_a_malformed_scope_record_is_a_read_error():
    from ledger.leases import entries_of

    for record in ({"type": "scope.entries"}, {"type": "scope.entries", "scope": "s", "rows": [["admit"]]},
                   {"type": "scope.entries", "scope": "s", "rows": [7]}):
        with pytest.raises(READ_ERRORS):
            entries_of(orjson.loads(orjson.dumps(record)))
