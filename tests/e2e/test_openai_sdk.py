"""The official openai SDK, unchanged but for base_url and api_key, against both dialects."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from tests.e2e.conftest import ALIAS_DEPLOYMENT

pytestmark = pytest.mark.e2e

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 2},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
        },
    },
}


def test_chat_non_stream(client: openai.OpenAI, alias: str) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model=alias,
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello."}],
        max_completion_tokens=20,
    )
    resp = raw.parse()
    assert resp.object == "chat.completion"
    assert resp.model == alias
    assert resp.choices[0].message.role == "assistant"
    assert resp.choices[0].message.content
    assert resp.choices[0].finish_reason in ("stop", "length")
    assert resp.usage.completion_tokens <= 20
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens
    expected_dep = ALIAS_DEPLOYMENT[alias]
    assert raw.headers["x-fb-deployment"] == expected_dep
    assert raw.headers["x-fb-attempts"] == "1"
    assert raw.headers["x-request-id"].startswith("req_")
    extra = resp.model_extra["x_farebox"]
    assert extra["deployment"] == expected_dep and extra["cost_micro"] > 0


def test_stream_with_usage_ends_with_usage_and_cost(client: openai.OpenAI, alias: str) -> None:
    chunks = list(
        client.chat.completions.create(
            model=alias,
            messages=[{"role": "user", "content": "Tell me a short story."}],
            stream=True,
            stream_options={"include_usage": True},
            max_completion_tokens=16,
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip()
    assert {c.id for c in chunks} == {chunks[0].id}
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
    last = chunks[-1]
    assert last.choices == []
    assert last.usage.completion_tokens == 16
    extra = last.model_extra["x_farebox"]
    assert extra["deployment"].startswith("sim-") and extra["cost_micro"] > 0 and extra["currency"] == "INR"
    assert extra["price_version"] == 1
    assert all(c.usage is None for c in chunks[:-1])


def test_stream_without_include_usage_has_no_usage_chunk(client: openai.OpenAI, alias: str) -> None:
    chunks = list(client.chat.completions.create(
        model=alias, messages=[{"role": "user", "content": "hi"}], stream=True, max_completion_tokens=5))
    assert chunks and all(c.choices for c in chunks)
    assert all(c.usage is None for c in chunks)


@pytest.mark.parametrize("stream", [False, True])
def test_tool_call_round_trip(client: openai.OpenAI, alias: str, stream: bool) -> None:
    messages: list[dict] = [{"role": "user", "content": "What's the weather in Pune?"}]
    kw = dict(model=alias, messages=messages, tools=[WEATHER_TOOL], tool_choice="required")
    if stream:
        calls: dict[int, dict] = {}
        finish = None
        for chunk in client.chat.completions.create(stream=True, **kw):
            for choice in chunk.choices:
                finish = choice.finish_reason or finish
                for tc in choice.delta.tool_calls or []:
                    slot = calls.setdefault(tc.index, {"id": None, "name": None, "arguments": ""})
                    slot["id"] = tc.id or slot["id"]
                    if tc.function and tc.function.name:
                        slot["name"] = tc.function.name
                    if tc.function and tc.function.arguments:
                        slot["arguments"] += tc.function.arguments
        assert finish == "tool_calls"
        call = calls[0]
    else:
        resp = client.chat.completions.create(**kw)
        assert resp.choices[0].finish_reason == "tool_calls"
        tc = resp.choices[0].message.tool_calls[0]
        call = {"id": tc.id, "name": tc.function.name, "arguments": tc.function.arguments}
    assert call["name"] == "get_weather" and call["id"]
    args = json.loads(call["arguments"])
    jsonschema.validate(args, WEATHER_TOOL["function"]["parameters"])
    # Send the tool result back: the model answers in text.
    messages += [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call["id"], "type": "function", "function": {"name": call["name"], "arguments": call["arguments"]}}]},
        {"role": "tool", "tool_call_id": call["id"], "content": json.dumps({"temp_c": 31})},
    ]
    final = client.chat.completions.create(model=alias, messages=messages, tools=[WEATHER_TOOL])
    assert final.choices[0].finish_reason == "stop"
    assert final.choices[0].message.content


def test_json_schema_response_format(client: openai.OpenAI, alias: str) -> None:
    schema = {"type": "object", "properties": {"summary": {"type": "string"}, "score": {"type": "integer"}},
              "required": ["summary", "score"], "additionalProperties": False}
    resp = client.chat.completions.create(
        model=alias, messages=[{"role": "user", "content": "Summarise: ok"}],
        response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": schema, "strict": True}},
    )
    jsonschema.validate(json.loads(resp.choices[0].message.content), schema)


def test_legacy_max_tokens_is_honoured(client: openai.OpenAI, alias: str) -> None:
    resp = client.chat.completions.create(model=alias, messages=[{"role": "user", "content": "go"}], max_tokens=3)
    assert resp.usage.completion_tokens == 3 and resp.choices[0].finish_reason == "length"


def test_embeddings(client: openai.OpenAI) -> None:
    resp = client.embeddings.create(model="embed-default", input=["first text", "second text"])
    assert resp.model == "embed-default"
    assert [d.index for d in resp.data] == [0, 1]
    assert len(resp.data[0].embedding) > 0 and resp.data[0].embedding != resp.data[1].embedding
    assert resp.usage.prompt_tokens > 0
    # The SDK asks for base64 by default when numpy is absent? Either way it decodes to floats.
    again = client.embeddings.create(model="embed-default", input="first text")
    assert again.data[0].embedding == resp.data[0].embedding


def test_models_filtered_by_key(client: openai.OpenAI, stack, embed_only_key: str) -> None:
    names = sorted(m.id for m in client.models.list())
    assert names == ["chat-anthropic", "chat-azure", "chat-bedrock", "chat-compat", "chat-default", "chat-gemini",
                     "chat-openai", "embed-default"]
    with openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=embed_only_key, max_retries=0) as other:
        assert [m.id for m in other.models.list()] == ["embed-default"]
        assert other.models.retrieve("embed-default").id == "embed-default"
        with pytest.raises(openai.NotFoundError):
            other.models.retrieve("chat-default")
        with pytest.raises(openai.PermissionDeniedError) as err:
            other.chat.completions.create(model="chat-default", messages=[{"role": "user", "content": "x"}])
        assert err.value.code == "model_not_allowed"


def test_bad_key_is_authentication_error(stack) -> None:
    with openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key="fb-dev-not-a-key", max_retries=0) as bad:
        with pytest.raises(openai.AuthenticationError) as err:
            bad.chat.completions.create(model="chat-default", messages=[{"role": "user", "content": "x"}])
    assert err.value.status_code == 401
    assert err.value.body["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("alias_name", "extra", "param"),
    [
        ("chat-anthropic", {"logit_bias": {"50256": -100}}, "logit_bias"),
        ("chat-anthropic", {"n": 2}, "n"),
        ("chat-openai", {"top_k": 5}, "top_k"),
    ],
)
def test_unsupported_parameter_is_bad_request_naming_it(client: openai.OpenAI, alias_name, extra, param) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model=alias_name, messages=[{"role": "user", "content": "x"}], extra_body=extra)
    assert err.value.param == param
    assert param in err.value.message
    assert err.value.code == "unsupported_parameter"
