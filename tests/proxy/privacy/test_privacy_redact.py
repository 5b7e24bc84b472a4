"""Reversible redaction: stable placeholders, restore in answers and streams, caller's look-alikes untouched."""

from __future__ import annotations

import copy
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.privacy.redact import ChunkRestorer, Redaction, StreamRestorer, redact_chat, restore_chat_response
from proxy.privacy.scanner import scan_chat

AADHAAR = "2345 6789 0124"
PAN = "ABCPK1234F"
CARD = "4111 1111 1111 1111"
EMAIL = "priya@example.com"
OTHER = "ravi@example.org"


def body(*texts: str) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": t} for t in texts]}


def redacted(b: dict) -> tuple[dict, Redaction]:
    return redact_chat(b, scan_chat(b, 100_000).findings)


def test_values_become_stable_placeholders_per_request():
    original = body(f"{EMAIL} and {OTHER}", f"again {EMAIL}, aadhaar {AADHAAR}, pan {PAN}, card {CARD}")
    keep = copy.deepcopy(original)
    out, red = redacted(original)
    assert out["messages"][0]["content"] == "<EMAIL_1> and <EMAIL_2>"
    assert out["messages"][1]["content"] == "again <EMAIL_1>, aadhaar <AADHAAR_1>, pan <PAN_1>, card <CARD_1>"
    assert original == keep  # the caller's body is untouched
    assert len(red) == 5 and EMAIL not in repr(red)


def test_non_stream_restore_content_and_tool_arguments():
    _, red = redacted(body(f"{EMAIL} {PAN}"))
    answer = {"choices": [{"index": 0, "message": {
        "content": "Sent to <EMAIL_1> for <PAN_1>.",
        "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": '{"to": "<EMAIL_1>"}'}}]}}]}
    restore_chat_response(answer, red)
    msg = answer["choices"][0]["message"]
    assert msg["content"] == f"Sent to {EMAIL} for {PAN}."
    assert json.loads(msg["tool_calls"][0]["function"]["arguments"]) == {"to": EMAIL}


def test_tool_arguments_in_the_request_are_redacted_and_stay_json():
    b = {"messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": json.dumps({"card": CARD})}}]}]}
    out, _ = redacted(b)
    assert json.loads(out["messages"][0]["tool_calls"][0]["function"]["arguments"]) == {"card": "<CARD_1>"}


def test_caller_written_placeholder_is_never_restored_into_data():
    out, red = redacted(body(f"Template: write <EMAIL_1> literally. My address is {EMAIL}."))
    assert out["messages"][0]["content"] == "Template: write <EMAIL_1> literally. My address is <EMAIL_2>."
    assert red.restore("<EMAIL_1> / <EMAIL_2> / <EMAIL_3> / <PAN_1>") == f"<EMAIL_1> / {EMAIL} / <EMAIL_3> / <PAN_1>"


def test_placeholders_from_nowhere_stay_literal():
    _, red = redacted(body("nothing here"))
    assert red.restore("<EMAIL_1>") == "<EMAIL_1>"
    assert ChunkRestorer(red).rewrite([{"choices": [{"index": 0, "delta": {"content": "<EMA"}}]}])[0][
        "choices"][0]["delta"]["content"] == "<EMA"


def test_a_split_placeholder_is_held_then_restored():
    _, red = redacted(body(f"{EMAIL}"))
    r = StreamRestorer(red)
    assert r.feed("Hi <EM") == "Hi "
    assert r.feed("AIL_") == ""
    assert r.feed("1>, bye <") == f"{EMAIL}, bye "
    assert r.flush() == "<"


def test_hold_back_is_bounded():
    _, red = redacted(body(f"{EMAIL}"))
    r = StreamRestorer(red)
    assert r.feed("<ABCDEFGHIJKLMNOP") == "<ABCDEFGHIJKLMNOP"  # longer than any issued placeholder


def _stream(parts: list[tuple[str, str]], finish: bool) -> list[list[dict]]:
    reads = []
    for kind, piece in parts:
        delta = {"content": piece} if kind == "c" else {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
        reads.append([{"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}])
    if finish:
        reads.append([{"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}])
    return reads


def _joined(chunks: list[dict]) -> tuple[str, str]:
    content = args = ""
    for chunk in chunks:
        for choice in chunk["choices"]:
            content += choice["delta"].get("content") or ""
            for call in choice["delta"].get("tool_calls") or ():
                args += call["function"].get("arguments") or ""
    return content, args


TOKENS = st.sampled_from(["<EMAIL_1>", "<EMAIL_2>", "<PAN_1>", "<CARD_1>", "<EMAIL_9>", "<", ">", "_", "EMAIL",
                          "1", "hi ", " ", "<EMAIL_", "x\"y"])


@settings(max_examples=300, deadline=None)
@given(text=st.lists(TOKENS, max_size=30).map("".join), cuts=st.lists(st.integers(0, 400), max_size=12),
       finish=st.booleans(), args=st.booleans())
def test_any_chunking_restores_exactly_what_non_stream_restore_gives(text, cuts, finish, args):
    _, red = redacted(body(f"{EMAIL} {OTHER} {PAN} {CARD} and <EMAIL_2> typed by the caller"))
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    pieces = [text[a:b] for a, b in zip(bounds, bounds[1:])]
    kind = "a" if args else "c"
    restorer = ChunkRestorer(red)
    out: list[dict] = []
    for read in _stream([(kind, p) for p in pieces], finish):
        out.extend(restorer.rewrite(read))
    out.extend(restorer.flush())
    content, arguments = _joined(out)
    if args:
        assert (content, arguments) == ("", red.restore(text, json_string=True))
    else:
        assert (content, arguments) == (red.restore(text), "")


@settings(max_examples=200, deadline=None)
@given(text=st.lists(TOKENS, max_size=30).map("".join), cuts=st.lists(st.integers(0, 400), max_size=12))
def test_stream_restorer_equals_restore(text, cuts):
    _, red = redacted(body(f"{EMAIL} {PAN}"))
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    r = StreamRestorer(red)
    emitted = "".join(r.feed(text[a:b]) for a, b in zip(bounds, bounds[1:])) + r.flush()
    assert emitted == red.restore(text)


def test_held_text_is_released_with_the_finish_chunk():
    _, red = redacted(body(EMAIL))
    restorer = ChunkRestorer(red)
    first = restorer.rewrite([{"choices": [{"index": 0, "delta": {"content": "to <EMAIL_"}, "finish_reason": None}]}])
    assert first[0]["choices"][0]["delta"]["content"] == "to "
    last = restorer.rewrite([{"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}])
    assert last[0]["choices"][0]["delta"]["content"] == "<EMAIL_"
    assert restorer.flush() == []


def test_content_parts_and_tool_results_are_redacted_in_place_of_the_copy():
    b = {"messages": [
        {"role": "user", "content": [{"type": "text", "text": f"PAN {PAN}"}, {"type": "image_url", "image_url": {}}]},
        {"role": "tool", "tool_call_id": "c", "content": f"card {CARD}, pan {PAN}"}]}
    out, red = redacted(b)
    assert out["messages"][0]["content"][0]["text"] == "PAN <PAN_1>"
    assert out["messages"][0]["content"][1] == {"type": "image_url", "image_url": {}}
    assert out["messages"][1]["content"] == "card <CARD_1>, pan <PAN_1>"
    assert b["messages"][1]["content"] == f"card {CARD}, pan {PAN}"
    assert red.restore(out["messages"][1]["content"]) == b["messages"][1]["content"]


def test_a_stream_cut_mid_placeholder_drops_the_half_placeholder_and_keeps_other_held_text():
    _, red = redacted(body(f"card {CARD}, mail {EMAIL}"))
    chunks = ChunkRestorer(red)
    out = chunks.rewrite([{"choices": [{"index": 0, "delta": {"content": "yours: <EMAIL_1> and <CAR"}}]}])
    assert out[0]["choices"][0]["delta"]["content"] == f"yours: {EMAIL} and "
    assert chunks.flush(broken=True) == []  # an error cut "<CARD_1>": its start is ours, never relayed
    # a stream that just ended keeps the exact-text invariant; a held "<" that no placeholder starts with stays
    ended = StreamRestorer(red)
    assert ended.feed("a <CAR") == "a " and ended.flush() == "<CAR"
    literal = StreamRestorer(red)
    assert literal.feed("x <Q") == "x " and literal.flush(broken=True) == "<Q"
