"""The Anthropic Messages API on farebox, driven by the official ``anthropic`` SDK with only a base URL and a
virtual key changed, against both deployment dialects (an OpenAI-dialect and an Anthropic-dialect deployment):
create, stream, count_tokens, tool use over three turns, Anthropic-shaped errors, and the metering of each
(streamed usage is never recorded as zero)."""

from __future__ import annotations

from typing import Iterator

import anthropic
import httpx
import pytest

from tests.e2e.conftest import DIALECT_ALIASES
from tests.harness import Stack, read_events

pytestmark = pytest.mark.e2e

WEATHER = {"name": "get_weather", "description": "The weather in a city.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.fixture(scope="module")
def claude(stack: Stack) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=stack.gateway_url, api_key=stack.key, max_retries=0) as client:
        yield client


def _events_of(stack: Stack, request_id: str) -> list:
    return [e for e in read_events(stack.events_path) if e.request_id == request_id]


@pytest.mark.parametrize("alias", DIALECT_ALIASES)
def test_create_answers_a_message_and_meters_it(stack: Stack, claude: anthropic.Anthropic, alias: str) -> None:
    raw = claude.messages.with_raw_response.create(
        model=alias, max_tokens=64, system="Be brief.", messages=[{"role": "user", "content": "Say hello."}])
    message = raw.parse()
    assert message.type == "message" and message.role == "assistant" and message.model == alias
    assert message.content[0].type == "text" and message.content[0].text
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0
    kinds = [e.type for e in _events_of(stack, raw.headers["x-fb-request-id"])]
    assert kinds == ["request.admitted", "request.attempted", "request.settled"]


@pytest.mark.parametrize("alias", DIALECT_ALIASES)
def test_a_stream_ends_with_the_real_usage_metered(stack: Stack, claude: anthropic.Anthropic, alias: str) -> None:
    with claude.messages.stream(model=alias, max_tokens=64,
                                messages=[{"role": "user", "content": "Tell me a story."}]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
        request_id = stream.response.headers["x-fb-request-id"]
    assert text and final.content[0].text == text
    assert final.usage.output_tokens > 0 and final.usage.input_tokens > 0
    assert final.stop_reason in ("end_turn", "max_tokens")
    events = _events_of(stack, request_id)
    attempted = next(e for e in events if e.type == "request.attempted")
    settled = next(e for e in events if e.type == "request.settled")
    assert attempted.usage.source == "provider" and attempted.usage.output > 0  # never zero on a stream
    assert attempted.usage.output + attempted.usage.reasoning == final.usage.output_tokens
    assert settled.cost_micro > 0


@pytest.mark.parametrize("alias", DIALECT_ALIASES)
def test_count_tokens(claude: anthropic.Anthropic, alias: str) -> None:
    short = claude.messages.count_tokens(model=alias, messages=[{"role": "user", "content": "Hi"}])
    long = claude.messages.count_tokens(model=alias, messages=[{"role": "user", "content": "Hi there. " * 200}])
    assert 0 < short.input_tokens < long.input_tokens


@pytest.mark.parametrize("alias", DIALECT_ALIASES)
def test_tool_use_over_three_turns(claude: anthropic.Anthropic, alias: str) -> None:
    messages: list = [{"role": "user", "content": "What is the weather in Pune and in Goa?"}]
    first = claude.messages.create(model=alias, max_tokens=200, tools=[WEATHER], tool_choice={"type": "any"},
                                   messages=messages)
    assert first.stop_reason == "tool_use"
    call = next(b for b in first.content if b.type == "tool_use")
    assert call.name == "get_weather" and isinstance(call.input, dict)
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "31 C"}]}]
    second = claude.messages.create(model=alias, max_tokens=200, tools=[WEATHER], messages=messages,
                                    extra_headers={"x-sim-tool-call": "get_weather"})
    assert second.stop_reason == "tool_use"
    again = next(b for b in second.content if b.type == "tool_use")
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in second.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": again.id, "content": "29 C"}]}]
    third = claude.messages.create(model=alias, max_tokens=200, tools=[WEATHER], messages=messages)
    assert third.stop_reason in ("end_turn", "max_tokens") and third.content[0].type == "text"


def test_errors_are_anthropic_shaped(stack: Stack, claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as missing:
        claude.messages.create(model="no-such-alias", max_tokens=10, messages=[{"role": "user", "content": "x"}])
    assert missing.value.body["type"] == "error" and missing.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError) as bad:
        claude.messages.create(model="chat-openai", max_tokens=10, messages=[])
    assert bad.value.body["error"]["type"] == "invalid_request_error" and "messages" in bad.value.body["error"]["message"]
    with anthropic.Anthropic(base_url=stack.gateway_url, api_key="fb-dev-wrong", max_retries=0) as stranger:
        with pytest.raises(anthropic.AuthenticationError) as denied:
            stranger.messages.create(model="chat-openai", max_tokens=10, messages=[{"role": "user", "content": "x"}])
    assert denied.value.body["error"]["type"] == "authentication_error"
    missing_tokens = httpx.post(stack.gateway_url + "/v1/messages", headers={"x-api-key": stack.key},
                                json={"model": "chat-openai", "messages": [{"role": "user", "content": "x"}]})
    assert missing_tokens.status_code == 400 and missing_tokens.json()["error"]["message"].startswith("max_tokens")


def test_models_in_anthropic_shape(claude: anthropic.Anthropic) -> None:
    models = [m.id for m in claude.models.list()]
    assert "chat-openai" in models and "chat-anthropic" in models
