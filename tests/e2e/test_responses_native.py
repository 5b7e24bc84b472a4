"""The Responses API passed through to a deployment that serves it (chat-openai: the simulator's /v1/responses),
driven by the official ``openai`` SDK: what a chat translation would lose reaches the provider and comes back.

* built-in tools and ``namespace`` groups go to the provider as written; a chat-only deployment (chat-compat)
  refuses a built-in tool with a 400 naming it;
* reasoning items with their encrypted content come back and, passed back on the next turn, are accepted by the
  simulator (which refuses any altered), the reasoning tokens metered;
* a stream passes the provider's typed events through and ends with the settled usage, metered (never zero);
* ``previous_response_id`` is resolved by farebox (the provider gets the whole conversation), and a stored
  passed-through response reads back;
* a request the privacy policy redacts is still passed through, with placeholders in and values back out.
"""

from __future__ import annotations

import json
import uuid

import httpx
import openai
import pytest

from tests.harness import Stack, mint, read_events, wait_key_live

pytestmark = pytest.mark.e2e

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
TOOLS = [{"type": "namespace", "name": "weather", "description": "Weather tools.", "tools": [WEATHER]},
         {"type": "web_search", "external_web_access": False}]


def _sent(stack: Stack, marker: str) -> list[dict]:
    data = httpx.get(f"{stack.sim_url}/_sim/requests", params={"n": 50}).json()["data"]
    return [e for e in data if marker in json.dumps(e["body"])]


def _events_of(stack: Stack, request_id: str) -> list:
    return [e for e in read_events(stack.events_path) if e.request_id == request_id]


def test_built_in_tools_and_reasoning_pass_through_over_turns(stack: Stack, client: openai.OpenAI) -> None:
    history: list = [{"role": "user", "content": "Weather in Pune? [native-turns]"}]
    raw = client.responses.with_raw_response.create(
        model="chat-openai", input=history, tools=TOOLS, tool_choice="required", reasoning={"effort": "low"},
        include=["reasoning.encrypted_content"], store=False, max_output_tokens=400)
    first = raw.parse()
    assert first.id == f"resp_{raw.headers['x-fb-request-id']}" and first.model == "chat-openai"
    reasoning, call = first.output
    assert reasoning.type == "reasoning" and reasoning.encrypted_content and call.name == "get_weather"
    (sent,) = _sent(stack, "[native-turns]")
    assert sent["path"] == "/v1/responses" and sent["body"]["tools"] == TOOLS  # as the client wrote them
    attempted = next(e for e in _events_of(stack, raw.headers["x-fb-request-id"]) if e.type == "request.attempted")
    assert attempted.usage.reasoning == first.usage.output_tokens_details.reasoning_tokens > 0
    history += [item.model_dump(exclude_none=True) for item in first.output]
    history.append({"type": "function_call_output", "call_id": call.call_id, "output": "31 C"})
    second = client.responses.create(model="chat-openai", input=history, tools=TOOLS, store=False,
                                     max_output_tokens=200)  # the simulator checks the reasoning passed back
    assert second.output_text and second.usage.input_tokens > first.usage.input_tokens
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="chat-compat", input="hi", tools=TOOLS)
    assert refused.value.body["param"] == "tools[1].type" and "web_search" in refused.value.body["message"]


def test_a_passed_through_stream_is_metered_from_its_completed_event(stack: Stack, client: openai.OpenAI) -> None:
    with client.responses.with_streaming_response.create(model="chat-openai", input="Tell me a story.", stream=True,
                                                         reasoning={"effort": "medium"},
                                                         max_output_tokens=64) as raw:
        request_id = raw.headers["x-fb-request-id"]
        events = [json.loads(line[6:]) for line in raw.iter_lines() if line.startswith("data: ")]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "response.created" and kinds[-1] in ("response.completed", "response.incomplete")
    assert "response.output_item.added" in kinds and "response.output_text.delta" in kinds
    assert all(e["response"]["id"] == f"resp_{request_id}" for e in events if "response" in e)
    seqs = [e["sequence_number"] for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    final = events[-1]["response"]
    attempted = next(e for e in _events_of(stack, request_id) if e.type == "request.attempted")
    assert attempted.usage.source == "provider" and attempted.usage.output > 0 and attempted.usage.reasoning > 0
    assert final["usage"]["output_tokens"] == attempted.usage.output + attempted.usage.reasoning
    assert final["output"][0]["type"] == "reasoning" and final["x_farebox"]["cost_micro"] > 0


def test_previous_response_id_is_resolved_by_farebox_and_the_response_reads_back(stack: Stack,
                                                                                  client: openai.OpenAI) -> None:
    first = client.responses.create(model="chat-openai", input="Remember: the code is 42. [native-chain]",
                                    max_output_tokens=32)
    second = client.responses.create(model="chat-openai", previous_response_id=first.id, input="What is the code?",
                                     max_output_tokens=32)
    sent = [e["body"] for e in _sent(stack, "[native-chain]")]
    assert len(sent) == 2 and "previous_response_id" not in sent[1]
    assert sent[1]["input"][0]["content"][0]["text"].endswith("[native-chain]")  # the whole conversation
    assert sent[1]["input"][-1] == {"role": "user", "content": "What is the code?"}
    kept = client.responses.retrieve(second.id)
    assert kept.previous_response_id == first.id and kept.output_text == second.output_text


@pytest.mark.parametrize("stream", [False, True])
def test_a_redacted_request_is_still_passed_through_with_values_back(stack: Stack, stream: bool) -> None:
    """The privacy policy redacts before the deployment: the provider gets the client's body with the scanned chat
    body's placeholders, and the answer (the simulator echoes the prompt) comes back with the values."""
    key = mint(stack.config, "platform", "playground", "chat-openai", "--data-class-ceiling", "confidential")
    wait_key_live(stack.gateway_url, key)
    marker = uuid.uuid4().hex
    text = f"[{marker}] Mail asha.k@example.com about PAN ABCPE1234F."
    with openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=key, max_retries=0) as client:
        kwargs = {"model": "chat-openai", "instructions": "Reply to asha.k@example.com.", "max_output_tokens": 400,
                  "input": [{"role": "user", "content": [{"type": "input_text", "text": text}]}],
                  "extra_headers": {"x-sim-echo": "3"}}
        if stream:
            with client.responses.stream(**kwargs) as s:
                deltas = "".join(e.delta for e in s if e.type == "response.output_text.delta")
                final = s.get_final_response()
            assert deltas == text  # restored across delta boundaries
        else:
            final = client.responses.create(**kwargs)
    assert final.output_text == text
    sent = [e for e in httpx.get(f"{stack.sim_url}/_sim/requests", params={"n": 50}).json()["data"]
            if marker in json.dumps(e["body"])]
    assert len(sent) == 1 and sent[0]["path"] == "/v1/responses"
    wire = json.dumps(sent[0]["body"])
    assert "asha.k@example.com" not in wire and "ABCPE1234F" not in wire
    assert "<EMAIL_1>" in sent[0]["body"]["instructions"] and "<PAN_1>" in wire


def test_input_tokens_are_the_providers_own_count_where_it_serves_the_api(client: openai.OpenAI) -> None:
    body = {"instructions": "Be brief.", "input": "How many tokens is this prompt, exactly?"}
    raw = client.responses.input_tokens.with_raw_response.count(model="chat-openai", **body)
    answered = client.responses.create(model="chat-openai", max_output_tokens=16, **body)
    assert raw.headers["x-fb-token-count"] == "provider" and raw.parse().input_tokens == answered.usage.input_tokens
    estimated = client.responses.input_tokens.with_raw_response.count(model="chat-compat", **body)
    assert estimated.headers["x-fb-token-count"] == "estimate" and estimated.parse().input_tokens > 0
