"""``proxy.upstream.responses_native``: a Responses answer (body or typed events, in the shapes OpenAI's API
reference documents) read into the chat-shaped result every surface meters, with the provider's own kept."""

from __future__ import annotations

import orjson
import pytest

from proxy.errors import UpstreamError
from proxy.upstream.base import SSEEvent
from proxy.upstream.responses_native import ResponsesEvents, parse_response

USAGE = {"input_tokens": 120, "input_tokens_details": {"cached_tokens": 100}, "output_tokens": 50,
         "output_tokens_details": {"reasoning_tokens": 30}, "total_tokens": 170}
OUTPUT = [{"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
          {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
           "content": [{"type": "output_text", "text": "Hi there", "annotations": []}]},
          {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "w", "arguments": "{\"c\":1}",
           "status": "completed"}]


def _ev(data: dict) -> SSEEvent:
    return SSEEvent(data["type"], orjson.dumps(data).decode())


def test_a_response_body_is_read_with_its_usage_and_kept() -> None:
    data = {"id": "resp_1", "object": "response", "status": "completed", "output": OUTPUT, "usage": USAGE}
    result = parse_response(data)
    message = result.body["choices"][0]["message"]
    assert message["content"] == "Hi there" and message["tool_calls"][0]["id"] == "call_1"
    assert result.finish_reason == "tool_calls" and result.native is data
    u = result.usage
    assert (u.input, u.cached_input, u.output, u.reasoning, u.source) == (20, 100, 20, 30, "provider")


@pytest.mark.parametrize(("usage", "source"), [
    ({**USAGE, "input_tokens": -1}, "provider_invalid"),
    ({**USAGE, "output_tokens_details": {"reasoning_tokens": 99}}, "provider_invalid"),
    (None, "estimated"),  # nothing reported: farebox estimates (UNREPORTED)
])
def test_a_bad_or_missing_usage_is_marked_never_trusted(usage: object, source: str) -> None:
    result = parse_response({"object": "response", "status": "completed", "output": OUTPUT, "usage": usage})
    assert result.usage.source == source


def test_a_failed_response_or_an_error_object_raises() -> None:
    with pytest.raises(UpstreamError):
        parse_response({"object": "response", "status": "failed", "output": [],
                        "error": {"code": "server_error", "message": "boom"}})
    with pytest.raises(UpstreamError):
        parse_response({"error": {"type": "invalid_request_error", "message": "bad"}})


def test_the_typed_stream_is_read_into_chunks_and_kept_as_sent() -> None:
    events = [
        {"type": "response.created", "sequence_number": 0, "response": {"id": "resp_1", "status": "in_progress"}},
        {"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": OUTPUT[0]},
        {"type": "response.output_text.delta", "sequence_number": 2, "output_index": 1, "item_id": "msg_1",
         "content_index": 0, "delta": "Hi "},
        {"type": "response.output_text.delta", "sequence_number": 3, "output_index": 1, "item_id": "msg_1",
         "content_index": 0, "delta": "there"},
        {"type": "response.output_item.added", "sequence_number": 4, "output_index": 2,
         "item": {**OUTPUT[2], "arguments": "", "status": "in_progress"}},
        {"type": "response.function_call_arguments.delta", "sequence_number": 5, "output_index": 2,
         "item_id": "fc_1", "delta": "{\"c\":1}"},
        {"type": "response.completed", "sequence_number": 6,
         "response": {"id": "resp_1", "status": "completed", "output": OUTPUT, "usage": USAGE}},
    ]
    t = ResponsesEvents()
    chunks = [c for e in events for c in t.feed(_ev(e))]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    calls = [tc for c in chunks for tc in c["choices"][0]["delta"].get("tool_calls") or ()]
    assert text == "Hi there" and calls[0]["id"] == "call_1" and calls[1]["function"]["arguments"] == "{\"c\":1}"
    assert t.done and t.finish_reason == "tool_calls" and t.usage.reasoning == 30 and t.usage.cached_input == 100
    assert [orjson.loads(e.data)["sequence_number"] for e in t.take()] == list(range(7)) and t.take() == []
    assert t.text_so_far() == "Hi there{\"c\":1}"


def test_an_error_event_raises_mid_stream() -> None:
    t = ResponsesEvents()
    with pytest.raises(UpstreamError):
        t.feed(_ev({"type": "error", "code": "rate_limit_exceeded", "message": "slow down", "sequence_number": 3}))
    with pytest.raises(UpstreamError):
        t.feed(_ev({"type": "response.failed", "sequence_number": 4,
                    "response": {"status": "failed", "error": {"code": "server_error", "message": "x"}}}))


def test_placeholders_go_into_every_text_the_provider_reads_but_reasoning() -> None:
    from proxy.privacy.redact import Redaction
    from proxy.upstream.responses_native import redacted_body, restored_response

    r = Redaction()
    r.placeholder("email", "asha@example.com")
    body = {"instructions": "Write to asha@example.com", "input": [
        {"role": "user", "content": "I am asha@example.com"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "cc asha@example.com"}]},
        {"type": "reasoning", "id": "rs_1", "encrypted_content": "asha@example.com", "summary": []},
        {"type": "function_call", "call_id": "c", "name": "mail", "arguments": "{\"to\": \"asha@example.com\"}"},
        {"type": "function_call_output", "call_id": "c", "output": "sent to asha@example.com"}]}
    out = redacted_body(body, r.redact)
    wire = orjson.dumps(out).decode()
    assert wire.count("asha@example.com") == 1 and out["input"][2] == body["input"][2]  # reasoning untouched
    assert out["instructions"] == "Write to <EMAIL_1>" and out["input"][3]["arguments"] == "{\"to\": \"<EMAIL_1>\"}"
    assert body["instructions"] == "Write to asha@example.com"  # the client's body is left as it was
    answer = {"output": [{"type": "reasoning", "id": "rs", "summary": []},
                         {"type": "message", "content": [{"type": "output_text", "text": "Hi <EMAIL_1>"}]},
                         {"type": "function_call", "arguments": "{\"to\": \"<EMAIL_1>\"}"}]}
    back = restored_response(answer, r.restore)
    assert back["output"][1]["content"][0]["text"] == "Hi asha@example.com"
    assert back["output"][2]["arguments"] == "{\"to\": \"asha@example.com\"}"
