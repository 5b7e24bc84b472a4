"""The Responses surface's translation, pure: a Responses request as a chat request, a chat answer as a response
object, chat chunks as the Responses stream's typed events (the shapes OpenAI documents)."""

from __future__ import annotations

import orjson
import pytest

from ledger.usage import TokenUsage
from proxy.api.responses.request import validate_response
from proxy.api.responses.response import ResponsesEncoder, response_of
from proxy.errors import GatewayError, InvalidRequest


def test_items_over_turns_become_the_same_chat_request() -> None:
    call = validate_response({
        "model": "chat-default", "instructions": "Be brief.",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "Weather?"},
                                               {"type": "input_image", "image_url": "https://x/y.png", "detail": "low"}]},
                  {"type": "reasoning", "id": "rs_1", "summary": []},
                  {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
                   "content": [{"type": "output_text", "text": "Let me check.", "annotations": []}]},
                  {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "w", "arguments": "{}"},
                  {"type": "function_call", "id": "fc_2", "call_id": "call_2", "name": "w", "arguments": "{}"},
                  {"type": "function_call_output", "call_id": "call_1", "output": "31 C"},
                  {"type": "function_call_output", "call_id": "call_2", "output": "29 C"}],
        "tools": [{"type": "function", "name": "w", "parameters": {"type": "object"}, "strict": True}],
        "tool_choice": {"type": "function", "name": "w"}, "reasoning": {"effort": "low"},
        "text": {"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}, "strict": True}},
        "max_output_tokens": 300, "stream": True})
    chat = call.chat
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "assistant", "tool", "tool"]
    assert chat["messages"][1]["content"][1] == {"type": "image_url", "image_url": {"url": "https://x/y.png",
                                                                                    "detail": "low"}}
    assistant = chat["messages"][2]
    assert assistant["content"] == "Let me check." and [c["id"] for c in assistant["tool_calls"]] == ["call_1", "call_2"]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "w"}}
    assert chat["tools"][0]["function"]["strict"] is True and chat["reasoning_effort"] == "low"
    assert chat["response_format"]["json_schema"]["name"] == "out" and chat["max_completion_tokens"] == 300
    assert call.stream and chat["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(("body", "param"), [
    ({"input": "x"}, "model"),
    ({"model": "m"}, "input"),
    ({"model": "m", "input": "x", "tools": [{"type": "namespace", "name": "n", "tools": [{"type": "web_search"}]}]},
     "tools[0].tools[0].type"),
    ({"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].id"),
    ({"model": "m", "input": "x", "max_output_tokens": 5}, "max_output_tokens"),
    ({"model": "m", "input": "x", "metadata": {"k": 1}}, "metadata"),
    ({"model": "m", "input": "x", "text": {"format": {"type": "yaml"}}}, "text.format.type"),
])
def test_what_farebox_cannot_carry_is_a_400_naming_it(body: dict, param: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        validate_response(body)
    assert refused.value.param == param


def test_a_chat_answer_is_rendered_as_a_response() -> None:
    completion = {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "w", "arguments": '{"c":"Goa"}'}}]}}]}
    body = {"model": "chat-default", "input": "x", "metadata": {"a": "b"}, "tools": [{"type": "function", "name": "w"}]}
    response = response_of(completion, TokenUsage(input=10, cached_input=30, output=5, reasoning=2), body,
                           "resp_r1", "chat-default", 7)
    assert response["status"] == "completed" and response["metadata"] == {"a": "b"} and response["created_at"] == 7
    assert [item["type"] for item in response["output"]] == ["message", "function_call"]
    assert response["output"][1]["call_id"] == "call_1" and response["output"][1]["arguments"] == '{"c":"Goa"}'
    assert response["usage"] == {"input_tokens": 40, "input_tokens_details": {"cached_tokens": 30},
                                 "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 2},
                                 "total_tokens": 47}
    cut = response_of({"choices": [{"finish_reason": "length", "message": {"content": "Hel"}}]}, TokenUsage(), body,
                      "resp_r2", "chat-default", 7)
    assert cut["status"] == "incomplete" and cut["incomplete_details"] == {"reason": "max_output_tokens"}


def _events(data: bytes) -> list[dict]:
    out = []
    for block in data.decode().strip().split("\n\n"):
        kind, payload = block.split("\n")
        event = orjson.loads(payload.removeprefix("data: "))
        assert event["type"] == kind.removeprefix("event: ")
        out.append(event)
    return out


def test_chat_chunks_become_typed_events_numbered_in_order() -> None:
    enc = ResponsesEncoder({"model": "chat-default"}, "resp_r3", "chat-default", 1)
    data = enc.encode([{"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}}]},
                       {"choices": [{"index": 0, "delta": {"content": " there"}}]},
                       {"choices": [{"index": 0, "delta": {"tool_calls": [
                           {"index": 0, "id": "call_1", "function": {"name": "w", "arguments": '{"c":'}}]}}]},
                       {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '1}'}}]},
                                     "finish_reason": "tool_calls"}]}])
    data += enc.tail(TokenUsage(input=4, output=6), {"cost_micro": 9}, True)
    events = _events(data)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done", "response.output_item.added",
        "response.function_call_arguments.delta", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    final = events[-1]["response"]
    assert final["output"][0]["content"][0]["text"] == "Hi there" and final["output"][1]["arguments"] == '{"c":1}'
    assert final["usage"]["output_tokens"] == 6 and final["x_farebox"] == {"cost_micro": 9}
    failed = _events(ResponsesEncoder({"model": "m"}, "resp_r4", "m", 1).error(GatewayError("boom", code="x")))
    assert failed[-1]["type"] == "response.failed" and failed[-1]["response"]["error"] == {"code": "x",
                                                                                           "message": "boom"}


def test_built_in_tools_and_their_calls_are_left_for_a_deployment_that_serves_the_api() -> None:
    body = {"model": "m", "input": [{"role": "user", "content": "hi"},
                                    {"type": "web_search_call", "id": "ws_1", "status": "completed"}],
            "tools": [{"type": "web_search"}, {"type": "namespace", "name": "agents", "tools": [
                {"type": "function", "name": "spawn", "parameters": {"type": "object"}}]}]}
    call = validate_response(body)
    assert call.native_only == (("input[1].type", "An input item of type 'web_search_call'"),
                                ("tools[0].type", "The built-in tool 'web_search'"))
    assert [t["function"]["name"] for t in call.chat["tools"]] == ["spawn"]  # a namespace's functions, flattened
