"""Anthropic dialect: request translation, JSON mode via a forced tool, refusals, stream specifics."""

from __future__ import annotations

import orjson
import pytest
from upstream_wire import assemble, body, deployment, translate, wire

from ledger.usage import TokenUsage
from proxy.errors import InvalidRequest, UnsupportedParameter, UpstreamAuth, UpstreamRateLimited
from proxy.upstream.anthropic_request import JSON_TOOL
from proxy.upstream.base import SSEEvent
from proxy.upstream.dialects import get_dialect

D = get_dialect("anthropic")
DEP = deployment("anthropic")
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]},
}}  # fmt: skip
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "temp_c": {"type": "number"}}}


def _sent(caller: dict, **kw) -> dict:
    caller = {"model": "chat-default", **caller}
    D.validate(caller, DEP)
    req = D.chat_request(caller, DEP, "sk-ant-test", max_output_tokens=kw.pop("max_out", 512), **kw)
    return orjson.loads(req.body)


def _user(text: str = "hi") -> dict:
    return {"role": "user", "content": text}


def test_url_headers_and_cap():
    req = D.chat_request({"messages": [_user()], "max_tokens": 9}, DEP, "sk-ant-test", max_output_tokens=300,
                         extra_headers={"x-api-key": "evil", "x-sim-fault": "none"})  # fmt: skip
    assert req.url == "https://api.anthropic.test/v1/messages"
    assert req.headers["x-api-key"] == "sk-ant-test" and req.headers["x-sim-fault"] == "none"
    assert req.headers["anthropic-version"] == "2023-06-01"
    assert req.headers["content-type"] == "application/json"
    sent = orjson.loads(req.body)
    assert sent == {"model": "pinned-model-1", "max_tokens": 300, "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}


def test_system_and_developer_messages_are_hoisted_and_joined():
    sent = _sent({"messages": [
        {"role": "system", "content": "You are terse."},
        _user("a"),
        {"role": "developer", "content": [{"type": "text", "text": "Answer in French."}]},
        _user("b"),
    ]})  # fmt: skip
    assert sent["system"] == "You are terse.\n\nAnswer in French."
    # the two user turns, now adjacent, are merged as Anthropic requires
    assert sent["messages"] == [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]


def test_tool_round_trip_request_side():
    sent = _sent({"messages": [
        _user("Weather in Paris and the time?"),
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"location": "Paris"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
        {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "14:00"}]},
        _user("Thanks"),
    ], "tools": [WEATHER], "tool_choice": "auto"})  # fmt: skip
    assert sent["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and the time?"}]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"location": "Paris"}},
            {"type": "tool_use", "id": "call_2", "name": "get_time", "input": {}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_1", "content": "18C"},
            {"type": "tool_result", "tool_use_id": "call_2", "content": "14:00"},
            {"type": "text", "text": "Thanks"},
        ]},
    ]  # fmt: skip
    assert sent["tools"] == [{"name": "get_weather", "description": "Weather for a city", "input_schema": WEATHER["function"]["parameters"]}]
    assert sent["tool_choice"] == {"type": "auto"}


def test_tool_round_trip_response_side():
    result = D.parse_chat(body("anthropic_message_tools.json"))
    msg = result.body["choices"][0]["message"]
    assert msg["content"] == "Okay, let me check the weather."
    assert msg["tool_calls"] == [{"id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "type": "function",
                                  "function": {"name": "get_weather", "arguments": '{"location":"Paris, France"}'}}]  # fmt: skip
    assert result.finish_reason == "tool_calls"
    assert result.usage == TokenUsage(input=472, output=89)
    assert result.body["usage"]["prompt_tokens"] == 472


@pytest.mark.parametrize(
    ("choice", "parallel", "expected"),
    [
        ("auto", None, {"type": "auto"}),
        ("required", None, {"type": "any"}),
        ("none", None, {"type": "none"}),
        ({"type": "function", "function": {"name": "get_weather"}}, None, {"type": "tool", "name": "get_weather"}),
        (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
        ("required", False, {"type": "any", "disable_parallel_tool_use": True}),
        ("none", False, {"type": "none"}),
        (None, True, None),
    ],
)
def test_tool_choice_mapping(choice, parallel, expected):
    caller = {"messages": [_user()], "tools": [WEATHER]}
    if choice is not None:
        caller["tool_choice"] = choice
    if parallel is not None:
        caller["parallel_tool_calls"] = parallel
    assert _sent(caller).get("tool_choice") == expected


@pytest.mark.parametrize(("stop", "expected"), [("END", ["END"]), (["a", "b"], ["a", "b"])])
def test_stop_sequences_and_sampling(stop, expected):
    sent = _sent({"messages": [_user()], "stop": stop, "temperature": 0.7, "top_p": 0.9, "user": "u-42"})
    assert sent["stop_sequences"] == expected
    assert (sent["temperature"], sent["top_p"], sent["metadata"]) == (0.7, 0.9, {"user_id": "u-42"})


def test_images_become_base64_or_url_sources():
    sent = _sent({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "compare"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "https://example.test/cat.jpg", "detail": "auto"}},
    ]}]})  # fmt: skip
    assert sent["messages"][0]["content"][1:] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "image", "source": {"type": "url", "url": "https://example.test/cat.jpg"}},
    ]


def test_json_schema_is_a_forced_tool():
    fmt = {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA, "strict": True}}
    sent = _sent({"messages": [_user()], "response_format": fmt})
    assert sent["tools"] == [{"name": JSON_TOOL, "description": sent["tools"][0]["description"], "input_schema": SCHEMA}]
    assert sent["tool_choice"] == {"type": "tool", "name": JSON_TOOL, "disable_parallel_tool_use": True}
    obj = _sent({"messages": [_user()], "response_format": {"type": "json_object"}})
    assert obj["tools"][0]["input_schema"]["type"] == "object"


def test_json_mode_answer_comes_back_as_text():
    result = D.parse_chat(body("anthropic_message_json.json"))
    msg = result.body["choices"][0]["message"]
    assert orjson.loads(msg["content"]) == {"city": "Paris", "temp_c": 18}
    assert "tool_calls" not in msg and result.finish_reason == "stop"


def test_json_mode_stream_fragments_become_content():
    chunks, tr = translate("anthropic", wire("anthropic_json.sse"))
    out = assemble(chunks)
    assert orjson.loads(out["content"]) == {"city": "Paris", "temp_c": 18}
    assert out["tool_calls"] == [] and out["finish_reason"] == tr.finish_reason == "stop"
    assert tr.usage == TokenUsage(input=120, output=31)


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"n": 2}, "n"), ({"logprobs": True}, "logprobs"), ({"top_logprobs": 3}, "top_logprobs"),
        ({"logit_bias": {"50256": -100}}, "logit_bias"), ({"presence_penalty": 0.5}, "presence_penalty"),
        ({"frequency_penalty": 0.1}, "frequency_penalty"), ({"seed": 7}, "seed"), ({"temperature": 1.5}, "temperature"),
        ({"audio": {"voice": "alloy", "format": "mp3"}}, "audio"), ({"modalities": ["text", "audio"]}, "modalities"),
        ({"prediction": {"type": "content", "content": "x"}}, "prediction"), ({"top_k": 5}, "top_k"),
        ({"reasoning_effort": "low"}, "reasoning_effort"),
        ({"messages": [{"role": "user", "content": "x", "name": "bob"}]}, "messages[0].name"),
        ({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]}]}, "messages[0].content[0].type"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/tiff;base64,AA"}}]}]}, "messages[0].content[0].image_url.url"),
        ({"messages": [{"role": "function", "name": None, "content": "x"}]}, "messages[0].role"),
        ({"tools": [{"type": "function", "function": {"name": JSON_TOOL}}]}, "tools[0].function.name"),
        ({"tools": [WEATHER], "response_format": {"type": "json_object"}}, "response_format"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "array"}}}}, "response_format.json_schema.schema"),
    ],
)  # fmt: skip
def test_unsupported_parameters_are_named(extra, param):
    caller = {"model": "m", "messages": [_user()], **extra}
    with pytest.raises(UnsupportedParameter) as info:
        D.validate(caller, DEP)
    assert info.value.param == param and param in info.value.message and DEP.id in info.value.message


def test_noop_values_of_unsupported_parameters_are_accepted():
    D.validate({"model": "m", "messages": [_user()], "n": 1, "logprobs": False, "presence_penalty": 0,
                "frequency_penalty": 0.0, "seed": None, "temperature": 1, "stream": True,
                "stream_options": {"include_usage": True}, "store": False, "service_tier": "auto"}, DEP)  # fmt: skip


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "tool", "content": "x"}],
        [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1]"}}]}],
        [],
    ],
)
def test_malformed_messages_are_invalid_requests(messages):
    with pytest.raises(InvalidRequest) as info:
        D.validate({"model": "m", "messages": messages}, DEP)
    assert not isinstance(info.value, UnsupportedParameter)


def test_refusal_and_unknown_stop_reasons():
    data = body("anthropic_message.json") | {"stop_reason": "refusal"}
    assert D.parse_chat(data).finish_reason == "content_filter"
    data["stop_reason"] = "stop_sequence"
    assert D.parse_chat(data).finish_reason == "stop"


def test_stream_usage_cumulative_and_pings_ignored():
    tr = D.stream_translator()
    assert tr.feed(SSEEvent("ping", '{"type": "ping"}')) == [] and tr.usage is None
    (first,) = tr.feed(SSEEvent("message_start", orjson.dumps({"type": "message_start", "message": {
        "usage": {"input_tokens": 10, "cache_read_input_tokens": 5, "cache_creation_input_tokens": 0, "output_tokens": 1}}}).decode()))  # fmt: skip
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    tr.feed(SSEEvent("message_delta", '{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":40}}'))
    assert tr.usage == TokenUsage(input=10, cached_input=5, output=40)
    assert tr.feed(SSEEvent("future_event", '{"type":"future_event"}')) == []
    tr.feed(SSEEvent("message_stop", '{"type":"message_stop"}'))
    assert tr.done


@pytest.mark.parametrize(("etype", "cls"), [("rate_limit_error", UpstreamRateLimited), ("authentication_error", UpstreamAuth)])
def test_in_stream_error_types(etype, cls):
    with pytest.raises(cls):
        D.stream_translator().feed(SSEEvent("error", orjson.dumps({"type": "error", "error": {"type": etype, "message": "x"}}).decode()))


def test_no_embeddings():
    with pytest.raises(UnsupportedParameter):
        D.embeddings_request({"input": "x"}, DEP, None)


def test_input_plus_max_tokens_over_the_window_is_context_length():
    raw = orjson.dumps({"type": "error", "error": {"type": "invalid_request_error", "message":
        "input length and `max_tokens` exceed context limit: 199000 + 4096 > 200000, decrease input length"}})
    err = D.parse_error(400, raw, {})
    assert err.code == "context_length_exceeded" and err.upstream_status == 400
