"""Stored responses through the official ``openai`` SDK: ``previous_response_id`` over three tool turns on both
deployment dialects, ``retrieve``, ``input_items.list``, ``delete``, ``store: false``, a streamed response kept
before its ``response.completed`` reaches the client, and another team's key seeing nothing."""

from __future__ import annotations

import json

import openai
import pytest

from tests.e2e.conftest import RESPONSES_ALIASES
from tests.harness import Stack, mint, read_events, wait_key_live

pytestmark = pytest.mark.e2e

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.mark.parametrize("alias", RESPONSES_ALIASES)
def test_previous_response_id_carries_a_tool_conversation_over_three_turns(stack: Stack, client: openai.OpenAI,
                                                                           alias: str) -> None:
    first = client.responses.create(model=alias, input="What is the weather in Pune?", tools=[WEATHER],
                                    tool_choice="required", max_output_tokens=200)
    call = next(item for item in first.output if item.type == "function_call")
    second = client.responses.create(model=alias, previous_response_id=first.id, tools=[WEATHER],
                                     max_output_tokens=200,
                                     input=[{"type": "function_call_output", "call_id": call.call_id, "output": "31 C"}])
    assert second.previous_response_id == first.id and second.status in ("completed", "incomplete")
    third = client.responses.create(model=alias, previous_response_id=second.id, input="And tomorrow?",
                                    max_output_tokens=64)
    assert third.output_text
    # the model saw the whole conversation: the third turn's input is larger than the first's
    assert third.usage.input_tokens > first.usage.input_tokens
    items = client.responses.input_items.list(third.id, order="asc", limit=100)
    kinds = [(item.type, getattr(item, "role", None)) for item in items.data]
    assert kinds[0] == ("message", "user") and ("function_call", None) in kinds
    assert ("function_call_output", None) in kinds and kinds[-1] == ("message", "user")
    assert all(item.id for item in items.data)
    settled = [e for e in read_events(stack.events_path) if e.type == "request.settled"]
    assert len({e.request_id for e in settled if f"resp_{e.request_id}" in (first.id, second.id, third.id)}) == 3


def test_retrieve_delete_and_store_false(client: openai.OpenAI) -> None:
    kept = client.responses.create(model="chat-openai", input="Remember me.", max_output_tokens=32,
                                   metadata={"case": "kept"})
    again = client.responses.retrieve(kept.id)
    assert again.id == kept.id and again.output_text == kept.output_text and again.metadata == {"case": "kept"}
    assert again.usage.output_tokens == kept.usage.output_tokens
    page = client.responses.input_items.list(kept.id)
    assert [item.type for item in page.data] == ["message"] and not page.has_more
    client.responses.delete(kept.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(kept.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="chat-openai", input="x", previous_response_id=kept.id)
    unkept = client.responses.create(model="chat-openai", input="Forget me.", max_output_tokens=32, store=False)
    assert unkept.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unkept.id)


@pytest.mark.parametrize("alias", RESPONSES_ALIASES)
def test_a_streamed_response_is_kept_before_it_completes(client: openai.OpenAI, alias: str) -> None:
    with client.responses.stream(model=alias, input="Tell me a story.", max_output_tokens=48) as stream:
        final = stream.get_final_response()
    kept = client.responses.retrieve(final.id)  # at once: kept before response.completed went out
    assert kept.output_text == final.output_text and kept.usage.output_tokens == final.usage.output_tokens
    follow = client.responses.create(model=alias, previous_response_id=final.id, input="Shorter, please.",
                                     max_output_tokens=32)
    assert follow.usage.input_tokens > final.usage.input_tokens


def test_another_teams_key_sees_nothing(stack: Stack, client: openai.OpenAI) -> None:
    mine = client.responses.create(model="chat-openai", input="Team secret.", max_output_tokens=32)
    key = mint(stack.config, "kyc-ops", "kyc-summariser", "chat-openai")
    wait_key_live(stack.gateway_url, key)
    with openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=key, max_retries=0) as other:
        for attempt in (lambda: other.responses.retrieve(mine.id),
                        lambda: other.responses.input_items.list(mine.id),
                        lambda: other.responses.delete(mine.id),
                        lambda: other.responses.create(model="chat-openai", input="x", previous_response_id=mine.id)):
            with pytest.raises(openai.NotFoundError) as hidden:
                attempt()
            assert "not found" in json.dumps(hidden.value.body)
    assert client.responses.retrieve(mine.id).id == mine.id  # still there for its own team
