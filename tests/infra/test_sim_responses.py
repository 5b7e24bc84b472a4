"""The simulator's OpenAI Responses API, read by the official ``openai`` SDK: a response and its usage, the typed
stream events the SDK's helper assembles, function tools (also grouped in a namespace) over turns, signed
reasoning passed back (and refused when altered or named without content), errors in OpenAI's shape."""

from __future__ import annotations

import json

import openai
import pytest

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.fixture
async def sdk(sim):
    async with openai.AsyncOpenAI(base_url=str(sim.make_url("/v1")), api_key="sk-test", max_retries=0) as client:
        yield client


async def test_a_response_and_its_usage(sdk):
    r = await sdk.responses.create(model="gpt-sim", instructions="Be brief.", input="Hello there, simulator!",
                                   max_output_tokens=16)
    assert r.object == "response" and r.id.startswith("resp_") and r.status == "incomplete"
    assert r.incomplete_details.reason == "max_output_tokens" and len(r.output_text.split(" ")) == 16
    assert r.usage.output_tokens == 16 and r.usage.input_tokens > 0 and r.usage.output_tokens_details.reasoning_tokens == 0
    full = await sdk.responses.create(model="gpt-sim", input="Hello there, simulator!")
    assert full.status == "completed" and full.output[0].type == "message"


async def test_the_stream_helper_assembles_the_typed_events(sdk):
    async with sdk.responses.stream(model="gpt-sim", input="Tell me a story.", max_output_tokens=64) as stream:
        kinds = [event.type async for event in stream]
        final = await stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds and "response.content_part.done" in kinds
    assert final.output_text and final.usage.output_tokens == len(final.output_text.split(" "))


async def test_function_tools_in_a_namespace_over_turns_with_reasoning_passed_back(sdk):
    grouped = {"type": "namespace", "name": "weather", "description": "Weather tools.", "tools": [WEATHER]}
    tools = [grouped, {"type": "web_search", "external_web_access": False}]
    history: list = [{"role": "user", "content": "Weather in Pune?"}]
    first = await sdk.responses.create(model="gpt-sim", input=history, tools=tools, tool_choice="required",
                                       reasoning={"effort": "low"}, include=["reasoning.encrypted_content"],
                                       store=False)
    reasoning, call = first.output
    assert reasoning.type == "reasoning" and reasoning.encrypted_content and call.type == "function_call"
    assert call.name == "get_weather" and isinstance(json.loads(call.arguments), dict)
    assert first.usage.output_tokens_details.reasoning_tokens > 0
    history += [item.model_dump(exclude_none=True) for item in first.output]
    history.append({"type": "function_call_output", "call_id": call.call_id, "output": "31 C"})
    second = await sdk.responses.create(model="gpt-sim", input=history, tools=tools, store=False)
    assert second.output_text
    forged = dict(history[1], encrypted_content=history[1]["encrypted_content"][:-4] + "AAAA")
    with pytest.raises(openai.BadRequestError, match="could not be verified"):
        await sdk.responses.create(model="gpt-sim", input=[history[0], forged, *history[2:]], store=False)
    with pytest.raises(openai.NotFoundError, match="not persisted"):
        await sdk.responses.create(model="gpt-sim", input=[history[0], {"type": "reasoning", "id": "rs_1",
                                                                         "summary": []}], store=False)


async def test_errors_are_openai_shaped(sdk):
    with pytest.raises(openai.RateLimitError):
        await sdk.responses.create(model="gpt-sim", input="hi", extra_headers={"x-sim-fault": "429"})
    with pytest.raises(openai.NotFoundError) as missing:
        await sdk.responses.create(model="gpt-sim", input="hi", previous_response_id="resp_nope")
    assert missing.value.body["code"] == "previous_response_not_found"
    with pytest.raises(openai.BadRequestError):
        await sdk.responses.create(model="gpt-sim", input="hi", max_output_tokens=4)


async def test_a_prompt_cache_key_caches_the_conversation_prefix(sdk):
    long = "The handbook says many things about refunds. " * 150
    history: list = [{"role": "developer", "content": long}, {"role": "user", "content": "First question?"}]
    first = await sdk.responses.create(model="gpt-sim", input=history, prompt_cache_key="session-1")
    assert first.usage.input_tokens_details.cached_tokens == 0
    history += [{"role": "assistant", "content": first.output_text}, {"role": "user", "content": "Second?"}]
    second = await sdk.responses.create(model="gpt-sim", input=history, prompt_cache_key="session-1")
    cached = second.usage.input_tokens_details.cached_tokens
    assert cached >= 1024 and cached % 128 == 0 and cached <= second.usage.input_tokens
    other = await sdk.responses.create(model="gpt-sim", input=history, prompt_cache_key="session-2")
    unkeyed = await sdk.responses.create(model="gpt-sim", input=history)
    assert other.usage.input_tokens_details.cached_tokens == 0 == unkeyed.usage.input_tokens_details.cached_tokens


async def test_input_tokens_count_as_the_answer_would(sdk, sim):
    body = {"model": "gpt-sim", "instructions": "Be brief.", "input": "Hello there, simulator!"}
    counted = await sdk.responses.input_tokens.count(**body)
    answered = await sdk.responses.create(**body)
    assert counted.input_tokens == answered.usage.input_tokens > 0
    claude = await sim.post("/v1/messages/count_tokens", json={"model": "claude-sim", "messages": [
        {"role": "user", "content": "Hello there, simulator!"}]}, headers={"x-api-key": "sk-test",
                                                                            "anthropic-version": "2023-06-01"})
    assert claude.status == 200 and (await claude.json())["input_tokens"] > 0
