"""The OpenAI Responses API on farebox, driven by the official ``openai`` SDK's ``client.responses`` with only a
base URL and a virtual key changed, against both deployment dialects: create, stream (usage metered from
``response.completed``, never zero), function tools over three turns, structured output, input token counts,
and clear errors for what is not carried yet."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.e2e.conftest import RESPONSES_ALIASES
from tests.harness import Stack, read_events

pytestmark = pytest.mark.e2e

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def _events_of(stack: Stack, request_id: str) -> list:
    return [e for e in read_events(stack.events_path) if e.request_id == request_id]


@pytest.mark.parametrize("alias", RESPONSES_ALIASES)
def test_create_returns_a_response_and_meters_it(stack: Stack, client: openai.OpenAI, alias: str) -> None:
    raw = client.responses.with_raw_response.create(model=alias, instructions="Be brief.", input="Say hello.",
                                                    max_output_tokens=64, metadata={"ticket": "T-1"})
    response = raw.parse()
    assert response.object == "response" and response.status in ("completed", "incomplete")
    assert response.model == alias and response.output_text and response.metadata == {"ticket": "T-1"}
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    kinds = [e.type for e in _events_of(stack, raw.headers["x-fb-request-id"])]
    assert kinds == ["request.admitted", "request.attempted", "request.settled"]


@pytest.mark.parametrize("alias", RESPONSES_ALIASES)
def test_a_stream_is_metered_from_response_completed(stack: Stack, client: openai.OpenAI, alias: str) -> None:
    deltas, completed = [], None
    with client.responses.with_streaming_response.create(model=alias, input="Tell me a story.", stream=True,
                                                         max_output_tokens=64) as raw:
        request_id = raw.headers["x-fb-request-id"]
        kinds = []
        for line in raw.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                kinds.append(event["type"])
                if event["type"] == "response.output_text.delta":
                    deltas.append(event["delta"])
                if event["type"] in ("response.completed", "response.incomplete"):
                    completed = event["response"]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert completed is not None and "".join(deltas) == completed["output"][0]["content"][0]["text"]
    usage = completed["usage"]
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    attempted = next(e for e in _events_of(stack, request_id) if e.type == "request.attempted")
    assert attempted.usage.source == "provider"  # never zero, never estimated on a clean stream
    assert attempted.usage.output + attempted.usage.reasoning == usage["output_tokens"]


@pytest.mark.parametrize("alias", RESPONSES_ALIASES)
def test_the_sdks_stream_helper_reads_our_events(client: openai.OpenAI, alias: str) -> None:
    with client.responses.stream(model=alias, input="Hello", max_output_tokens=32) as stream:
        text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert text and final.output_text == text and final.usage.output_tokens > 0


@pytest.mark.parametrize("alias", RESPONSES_ALIASES)
def test_function_tools_over_three_turns(client: openai.OpenAI, alias: str) -> None:
    history: list = [{"role": "user", "content": "What is the weather in Pune and in Goa?"}]
    first = client.responses.create(model=alias, input=history, tools=[WEATHER], tool_choice="required",
                                    max_output_tokens=200)
    call = next(item for item in first.output if item.type == "function_call")
    assert call.name == "get_weather" and isinstance(json.loads(call.arguments), dict)
    history += [item.model_dump(exclude_none=True) for item in first.output]
    history.append({"type": "function_call_output", "call_id": call.call_id, "output": "31 C"})
    second = client.responses.create(model=alias, input=history, tools=[WEATHER], max_output_tokens=200,
                                     extra_headers={"x-sim-tool-call": "get_weather"})
    again = next(item for item in second.output if item.type == "function_call")
    history += [item.model_dump(exclude_none=True) for item in second.output]
    history.append({"type": "function_call_output", "call_id": again.call_id, "output": "29 C"})
    third = client.responses.create(model=alias, input=history, tools=[WEATHER], max_output_tokens=200)
    assert third.output_text and not [item for item in third.output if item.type == "function_call"]


@pytest.mark.parametrize("alias", RESPONSES_ALIASES)
def test_structured_output(client: openai.OpenAI, alias: str) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
              "additionalProperties": False}
    response = client.responses.create(model=alias, input="Name a city.", max_output_tokens=100,
                                       text={"format": {"type": "json_schema", "name": "city", "schema": schema}})
    assert isinstance(json.loads(response.output_text), dict)


def test_input_tokens_and_what_is_not_carried_yet(stack: Stack, client: openai.OpenAI) -> None:
    auth = {"Authorization": f"Bearer {stack.key}"}
    short = httpx.post(stack.gateway_url + "/v1/responses/input_tokens", headers=auth,
                       json={"model": "chat-openai", "input": "Hi"}).json()
    long = httpx.post(stack.gateway_url + "/v1/responses/input_tokens", headers=auth,
                      json={"model": "chat-openai", "input": "Hi there. " * 200}).json()
    assert short["object"] == "response.input_tokens" and 0 < short["input_tokens"] < long["input_tokens"]
    with pytest.raises(openai.BadRequestError) as builtin:
        client.responses.create(model="chat-compat", input="x", tools=[{"type": "web_search"}])
    assert builtin.value.body["param"] == "tools[0].type" and "web_search" in builtin.value.body["message"]
    with pytest.raises(openai.NotFoundError) as chained:
        client.responses.create(model="chat-openai", input="x", previous_response_id="resp_123")
    assert chained.value.body["param"] == "previous_response_id"
    assert chained.value.body["code"] == "previous_response_not_found"
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_123")
