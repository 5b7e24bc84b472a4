"""The owner's socket frames (``streams.local.wire``): however the bytes are cut on arrival, the same frames
come out in order; a frame that is not one closes the connection with a reason."""

from __future__ import annotations

import struct
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from streams.local.wire import MAX_FRAME, FrameProtocol, WireError, frame


class Recording(FrameProtocol):
    def __init__(self) -> None:
        super().__init__()
        self.frames: list[dict[str, Any]] = []
        self.why: list[BaseException | None] = []

    def frame_received(self, message: dict[str, Any]) -> None:
        self.frames.append(message)

    def closed(self, why: BaseException | None) -> None:
        self.why.append(why)


class FakeTransport:
    """Just what ``FrameProtocol`` asks of a transport when it receives."""

    def __init__(self, protocol: FrameProtocol) -> None:
        self.protocol = protocol
        self.closing = False

    def is_closing(self) -> bool:
        return self.closing

    def abort(self) -> None:
        self.closing = True
        self.protocol.connection_lost(None)


def _connected() -> Recording:
    protocol = Recording()
    protocol.transport = FakeTransport(protocol)  # type: ignore[assignment]
    return protocol


messages = st.lists(st.fixed_dictionaries({"t": st.sampled_from(["ev", "ack", "grant"]), "n": st.integers(0, 10**9),
                                           "e": st.dictionaries(st.text(max_size=5), st.text(max_size=40))}),
                    max_size=12)


@given(messages=messages, cuts=st.lists(st.integers(0, 4000), max_size=20))
def test_frames_come_out_whole_and_in_order_however_the_bytes_are_cut(messages, cuts):
    wire = b"".join(frame(m) for m in messages)
    protocol = _connected()
    start = 0
    for cut in sorted({c for c in cuts if c < len(wire)}) + [len(wire)]:
        protocol.data_received(wire[start:cut])
        start = cut
    assert protocol.frames == messages and protocol.why == []


def test_a_frame_that_is_not_json_closes_the_connection_with_the_reason():
    protocol = _connected()
    protocol.data_received(frame({"t": "ev", "n": 1}) + struct.pack(">I", 5) + b"notjs" + frame({"t": "ev", "n": 2}))
    assert protocol.frames == [{"t": "ev", "n": 1}]
    assert isinstance(protocol.why[0], WireError) and "not JSON" in str(protocol.why[0])


def test_an_oversized_or_untyped_frame_closes_the_connection():
    big = _connected()
    big.data_received(struct.pack(">I", MAX_FRAME + 1))
    assert "over the limit" in str(big.why[0])
    untyped = _connected()
    untyped.data_received(frame({"n": 1}))  # type: ignore[arg-type]
    assert "type 't'" in str(untyped.why[0])


def test_a_connection_ending_inside_a_frame_says_so():
    protocol = _connected()
    protocol.data_received(frame({"t": "ev", "n": 1})[:-2])
    protocol.connection_lost(None)
    assert protocol.frames == [] and "inside a frame" in str(protocol.why[0])


def test_a_frame_the_receiver_cannot_handle_closes_the_connection_with_the_reason():
    class Picky(Recording):
        def frame_received(self, message: dict[str, Any]) -> None:
            message["scopes"]  # noqa: B018 - a field this frame lacks

    protocol = Picky()
    protocol.transport = FakeTransport(protocol)  # type: ignore[assignment]
    protocol.data_received(frame({"t": "rows", "n": 1}))
    assert "could not be handled: KeyError" in str(protocol.why[0])


class Writes(FakeTransport):
    def __init__(self, protocol: FrameProtocol) -> None:
        super().__init__(protocol)
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)


async def test_frames_no_one_waits_for_share_a_write_and_an_urgent_one_takes_them_along():
    import asyncio

    protocol = Recording()
    protocol.coalesce_s = 0.05
    transport = protocol.transport = Writes(protocol)  # type: ignore[assignment]
    for n in range(3):
        protocol.send({"t": "ack", "n": n}, urgent=False)
    await asyncio.sleep(0)
    assert transport.writes == []  # waiting for company
    await asyncio.sleep(0.1)
    assert transport.writes == [b"".join(frame({"t": "ack", "n": n}) for n in range(3))]
    protocol.send({"t": "ack", "n": 3}, urgent=False)
    protocol.send({"t": "done", "n": 4})  # someone waits for this one: it goes this turn, with the ack before it
    await asyncio.sleep(0)
    assert transport.writes[1:] == [frame({"t": "ack", "n": 3}) + frame({"t": "done", "n": 4})]


async def test_send_now_writes_before_it_returns_with_what_was_queued():
    protocol = Recording()
    protocol.coalesce_s = 0.05
    transport = protocol.transport = Writes(protocol)  # type: ignore[assignment]
    protocol.send({"t": "ev", "n": 1}, urgent=False)
    protocol.send_now({"t": "ev", "n": 2})  # a settlement: on the wire before the answer is
    assert transport.writes == [frame({"t": "ev", "n": 1}) + frame({"t": "ev", "n": 2})]
