"""The Anthropic Messages surface's translation, pure: a Messages request as a chat request, a chat answer as a
Message, chat chunks as Messages stream events (the shapes Anthropic documents)."""

from __future__ import annotations

import orjson
import pytest

from ledger.usage import TokenUsage
from proxy.api.messages.request import validate_messages
from proxy.api.messages.response import MessagesEncoder, error_body, error_status, message_of
from proxy.errors import GatewayError, InvalidRequest, UpstreamUnavailable

BASE = {"model": "chat-default", "max_tokens": 100, "messages": [{"role": "user", "content": "Hi"}]}


def test_a_conversation_with_tools_becomes_the_same_chat_request() -> None:
    call = validate_messages({
        **BASE, "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Weather?"},
                                         {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                      "data": "iVBOR"}}]},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
                                              {"type": "tool_use", "id": "toolu_1", "name": "w", "input": {"c": "Pune"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "31 C"}]},
        ],
        "tools": [{"name": "w", "description": "weather", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
        "stop_sequences": ["END"], "metadata": {"user_id": "u-1"}, "temperature": 0.5, "stream": True})
    chat = call.chat
    assert call.stream and call.max_tokens == 100 and chat["max_completion_tokens"] == 100
    assert chat["messages"][0] == {"role": "system", "content": "Be brief."}
    assert chat["messages"][1]["content"][1] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}}
    assert chat["messages"][2] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "toolu_1", "type": "function", "function": {"name": "w", "arguments": '{"c":"Pune"}'}}]}
    assert chat["messages"][3] == {"role": "tool", "tool_call_id": "toolu_1", "content": "31 C"}
    assert chat["tools"] == [{"type": "function", "function": {"name": "w", "parameters": {"type": "object"},
                                                               "description": "weather"}}]
    assert chat["tool_choice"] == "auto" and chat["parallel_tool_calls"] is False
    assert chat["stop"] == ["END"] and chat["user"] == "u-1" and chat["temperature"] == 0.5
    assert chat["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(("change", "param"), [
    ({"max_tokens": None}, "max_tokens"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages.0.role"),
    ({"messages": [{"role": "system", "content": [{"type": "image"}]}]}, "messages.0.content"),
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]}, "messages.0.content.0.type"),
    ({"tool_choice": {"type": "any"}}, "tool_choice"),
    ({"temperature": 1.5}, "temperature"),
    ({"stream": "yes"}, "stream"),
])
def test_what_the_messages_api_refuses_is_a_400_naming_it(change: dict, param: str) -> None:
    body = {k: v for k, v in {**BASE, **change}.items() if v is not None}
    with pytest.raises(InvalidRequest) as refused:
        validate_messages(body)
    assert refused.value.param == param


def test_count_tokens_needs_no_max_tokens() -> None:
    call = validate_messages({"model": "chat-default", "messages": [{"role": "user", "content": "Hi"}]}, counting=True)
    assert not call.stream and "max_completion_tokens" not in call.chat


def test_a_chat_answer_is_rendered_as_a_message() -> None:
    completion = {"choices": [{"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": "Hel"}}],
                  "x_farebox": {"cost_micro": 12}}
    usage = TokenUsage(input=10, cached_input=90, cache_write=5, output=3, reasoning=4, cache_write_1h=2)
    message = message_of(completion, usage, "msg_r1", "chat-default")
    assert message["content"] == [{"type": "text", "text": "Hel"}] and message["stop_reason"] == "max_tokens"
    assert message["usage"] == {"input_tokens": 10, "cache_read_input_tokens": 90, "cache_creation_input_tokens": 5,
                                "output_tokens": 7,
                                "cache_creation": {"ephemeral_5m_input_tokens": 3, "ephemeral_1h_input_tokens": 2}}


def _events(data: bytes) -> list[tuple[str, dict]]:
    out = []
    for block in data.decode().strip().split("\n\n"):
        kind, payload = block.split("\n")
        out.append((kind.removeprefix("event: "), orjson.loads(payload.removeprefix("data: "))))
    return out


def test_chat_chunks_become_messages_events_with_the_settled_usage_last() -> None:
    enc = MessagesEncoder("msg_r2", "chat-default")
    data = enc.encode([{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
                       {"choices": [{"index": 0, "delta": {"content": "Hi"}}]}])
    data += enc.encode([{"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "call_1", "function": {"name": "w", "arguments": '{"c":'}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"Goa"}'}}]},
                      "finish_reason": "tool_calls"}]}])
    data += enc.tail(TokenUsage(input=8, output=6), {"cost_micro": 3}, True)
    events = _events(data)
    assert [k for k, _ in events] == ["message_start", "content_block_start", "content_block_delta",
                                      "content_block_stop", "content_block_start", "content_block_delta",
                                      "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    assert events[4][1]["content_block"] == {"type": "tool_use", "id": "call_1", "name": "w", "input": {}}
    assert "".join(e["delta"]["partial_json"] for k, e in events if e.get("index") == 1 and k.endswith("delta")) \
        == '{"c":"Goa"}'
    delta = events[-2][1]
    assert delta["delta"]["stop_reason"] == "tool_use" and delta["usage"]["output_tokens"] == 6
    assert all(k == e["type"] for k, e in events)
    assert _events(enc.heartbeat) == [("ping", {"type": "ping"})]


def test_errors_in_anthropics_shape_and_statuses() -> None:
    overloaded = UpstreamUnavailable("busy")
    assert error_status(overloaded) == 529 and error_body(overloaded)["error"]["type"] == "overloaded_error"
    limited = GatewayError("slow down", status=429, code="key_requests_per_minute")
    assert error_body(limited) == {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down",
                                                              "farebox_code": "key_requests_per_minute"}}
    enc = MessagesEncoder("msg_r3", "chat-default")
    assert _events(enc.error(limited)) == [("error", {"type": "error", "error": error_body(limited)["error"]})]


def test_a_server_tool_is_left_for_an_anthropic_deployment() -> None:
    call = validate_messages({**BASE, "tools": [{"type": "web_search_20250305", "name": "web_search"}]})
    assert call.native_only == (("tools.0.type", "The server tool 'web_search_20250305'"),)
    assert "tools" not in call.chat
