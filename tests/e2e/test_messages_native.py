"""The Messages API passed through to an Anthropic deployment, driven by the official ``anthropic`` SDK: what a
chat translation would lose reaches Anthropic and comes back unchanged.

* extended thinking: the signed thinking block comes back as sent, and passed back on the next turns of a
  tool conversation the simulator (which checks signatures as Anthropic does) accepts it;
* a stream keeps its thinking and signature deltas, ends with the settled usage, and is metered;
* ``cache_control``: a long system prompt is written to the provider's cache (1 h TTL) then read, and both are
  metered and priced at the deployment's cache-write and cache-read prices, to the micro-rupee;
* ``top_k`` and ``thinking`` reach Anthropic; to an OpenAI deployment they are a 400 naming the parameter.
"""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Iterator

import anthropic
import httpx
import orjson
import pytest

from ledger.usage import TokenUsage
from pricing.book import Price
from pricing.rating import rate
from tests.harness import Stack, mint, read_events, wait_key_live

pytestmark = pytest.mark.e2e

WEATHER = {"name": "get_weather", "description": "The weather in a city.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
THINKING = {"type": "enabled", "budget_tokens": 1024}
ANTHROPIC_PRICE = Price(input=Decimal("3.00"), cached_input=Decimal("0.30"), cache_write=Decimal("3.75"),
                        output=Decimal("15.00"))  # examples/farebox.yaml, sim-anthropic-mumbai
FX = Decimal("88.00")


@pytest.fixture(scope="module")
def claude(stack: Stack) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=stack.gateway_url, api_key=stack.key, max_retries=0) as client:
        yield client


def _events_of(stack: Stack, request_id: str) -> list:
    return [e for e in read_events(stack.events_path) if e.request_id == request_id]


def test_thinking_blocks_pass_back_untouched_over_a_tool_conversation(stack: Stack,
                                                                      claude: anthropic.Anthropic) -> None:
    messages: list = [{"role": "user", "content": "What is the weather in Pune?"}]
    raw = claude.messages.with_raw_response.create(model="chat-anthropic", max_tokens=2048, thinking=THINKING,
                                                   tools=[WEATHER], messages=messages,
                                                   extra_headers={"x-sim-tool-call": "get_weather"})
    first = raw.parse()
    assert raw.headers["x-fb-deployment"] == "sim-anthropic-mumbai"
    assert first.id == f"msg_{raw.headers['x-fb-request-id']}" and first.model == "chat-anthropic"
    thinking, call = first.content[0], first.content[1]
    assert thinking.type == "thinking" and thinking.signature and thinking.thinking
    assert call.type == "tool_use" and first.stop_reason == "tool_use"
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "31 C"}]}]
    second = claude.messages.create(model="chat-anthropic", max_tokens=2048, thinking=THINKING, tools=[WEATHER],
                                    messages=messages)  # the simulator refuses a thinking block it did not sign
    assert second.content[0].type == "thinking" and second.content[-1].type == "text"
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in second.content]},
                 {"role": "user", "content": "And tomorrow?"}]
    third = claude.messages.create(model="chat-anthropic", max_tokens=2048, thinking=THINKING, tools=[WEATHER],
                                   messages=messages)
    assert third.stop_reason in ("end_turn", "max_tokens")
    attempted = next(e for e in _events_of(stack, raw.headers["x-fb-request-id"]) if e.type == "request.attempted")
    assert attempted.usage.output + attempted.usage.reasoning == first.usage.output_tokens  # thinking included


def test_a_thinking_stream_passes_through_and_is_metered(stack: Stack, claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(model="chat-anthropic", max_tokens=2048, thinking=THINKING,
                                messages=[{"role": "user", "content": "Think, then tell me a story."}]) as stream:
        kinds = [(event.type, getattr(getattr(event, "delta", None), "type", None)) for event in stream]
        final = stream.get_final_message()
        request_id = stream.response.headers["x-fb-request-id"]
    assert ("content_block_delta", "thinking_delta") in kinds and ("content_block_delta", "signature_delta") in kinds
    assert final.content[0].type == "thinking" and final.content[0].signature and final.content[1].text
    assert final.id == f"msg_{request_id}" and final.model == "chat-anthropic"
    settled = next(e for e in _events_of(stack, request_id) if e.type == "request.settled")
    attempted = next(e for e in _events_of(stack, request_id) if e.type == "request.attempted")
    assert attempted.usage.source == "provider"
    assert attempted.usage.output + attempted.usage.reasoning == final.usage.output_tokens
    assert final.usage.input_tokens == attempted.usage.input and settled.cost_micro > 0


@pytest.mark.parametrize("stream", [False, True])
def test_cache_control_writes_then_reads_and_both_are_priced(stack: Stack, claude: anthropic.Anthropic,
                                                             stream: bool) -> None:
    handbook = f"Handbook edition {'S' if stream else 'N'}: refunds within 30 days, always be courteous. " * 150
    system = [{"type": "text", "text": handbook, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    usages = []
    for question in ("Can I get a refund?", "How long do I have?"):
        kwargs = {"model": "chat-anthropic", "max_tokens": 64, "system": system,
                  "messages": [{"role": "user", "content": question}]}
        if stream:
            with claude.messages.stream(**kwargs) as s:
                final, request_id = s.get_final_message(), s.response.headers["x-fb-request-id"]
        else:
            raw = claude.messages.with_raw_response.create(**kwargs)
            final, request_id = raw.parse(), raw.headers["x-fb-request-id"]
        events = _events_of(stack, request_id)
        attempted = next(e for e in events if e.type == "request.attempted")
        settled = next(e for e in events if e.type == "request.settled")
        usages.append((final.usage, attempted.usage, settled.cost_micro))
    (write_seen, write_kept, write_cost), (read_seen, read_kept, read_cost) = usages
    assert write_seen.cache_creation_input_tokens > 1024 and write_seen.cache_read_input_tokens == 0
    assert write_kept.cache_write == write_seen.cache_creation_input_tokens and write_kept.cached_input == 0
    assert read_seen.cache_read_input_tokens == write_seen.cache_creation_input_tokens
    assert read_kept.cached_input == read_seen.cache_read_input_tokens and read_kept.cache_write == 0
    for kept, cost in ((write_kept, write_cost), (read_kept, read_cost)):
        assert cost == rate(TokenUsage(input=kept.input, cached_input=kept.cached_input, cache_write=kept.cache_write,
                                       output=kept.output, reasoning=kept.reasoning), ANTHROPIC_PRICE, FX)
    assert read_cost < write_cost


def test_top_k_and_thinking_reach_anthropic_and_are_refused_elsewhere(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(model="chat-anthropic", max_tokens=32, extra_body={"top_k": 5},
                                     messages=[{"role": "user", "content": "Hello"}])
    assert message.content[0].text
    for extra in ({"top_k": 5}, {"thinking": THINKING}):
        with pytest.raises(anthropic.BadRequestError) as refused:
            claude.messages.create(model="chat-openai", max_tokens=2048,
                                   messages=[{"role": "user", "content": "Hello"}], extra_body=extra)
        assert refused.value.body["type"] == "error" and next(iter(extra)) in refused.value.body["error"]["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_redacted_request_is_still_passed_through_with_placeholders_in_and_values_back(stack: Stack,
                                                                                        stream: bool) -> None:
    """The privacy policy redacts personal data before the Anthropic deployment: the client's own body goes with
    the same placeholders the scanned chat body got (its thinking kept), and the answer comes back restored."""
    key = mint(stack.config, "platform", "playground", "chat-anthropic", "--data-class-ceiling", "confidential")
    wait_key_live(stack.gateway_url, key)
    marker = uuid.uuid4().hex
    text = f"[{marker}] Mail asha.k@example.com about PAN ABCPE1234F."
    kwargs = {"model": "chat-anthropic", "max_tokens": 2048, "thinking": THINKING,
              "system": [{"type": "text", "text": "Reply to asha.k@example.com politely."}],
              "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
              "extra_headers": {"x-sim-echo": "3"}}
    with anthropic.Anthropic(base_url=stack.gateway_url, api_key=key, max_retries=0) as client:
        if stream:
            with client.messages.stream(**kwargs) as s:
                final = s.get_final_message()
        else:
            final = client.messages.create(**kwargs)
    assert final.content[0].type == "thinking" and final.content[0].signature  # passed through, not translated
    assert final.content[1].text == text  # the echo, restored across delta boundaries
    sent = [e["body"] for e in httpx.get(f"{stack.sim_url}/_sim/requests", params={"n": 50}).json()["data"]
            if e["path"] == "/v1/messages" and marker in str(e["body"])]
    assert len(sent) == 1 and "thinking" in sent[0]
    wire = orjson.dumps(sent[0]).decode()
    assert "asha.k@example.com" not in wire and "ABCPE1234F" not in wire
    assert "<EMAIL_1>" in sent[0]["system"][0]["text"] and "<PAN_1>" in wire


def test_a_system_turn_and_the_cap_named_as_the_messages_api_names_it(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(model="chat-anthropic", max_tokens=32, messages=[
        {"role": "user", "content": "Hello"}, {"role": "system", "content": "Answer in one line."},
        {"role": "user", "content": "Again"}])
    assert message.content[0].text
    with pytest.raises(anthropic.BadRequestError) as capped:
        claude.messages.create(model="chat-anthropic", max_tokens=20_000, messages=[
            {"role": "user", "content": "Hello"}])
    assert "'max_tokens'" in capped.value.body["error"]["message"]


def test_a_server_tool_reaches_anthropic_and_is_refused_elsewhere(stack: Stack, claude: anthropic.Anthropic) -> None:
    search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 1}
    message = claude.messages.create(model="chat-anthropic", max_tokens=32, tools=[search],
                                     messages=[{"role": "user", "content": "Search for farebox [server-tool]"}])
    assert message.content[0].text
    sent = [e["body"] for e in httpx.get(f"{stack.sim_url}/_sim/requests", params={"n": 50}).json()["data"]
            if "[server-tool]" in orjson.dumps(e["body"]).decode()]
    assert sent and sent[-1]["tools"] == [search]
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(model="chat-openai", max_tokens=32, tools=[search],
                               messages=[{"role": "user", "content": "Search"}])
    assert "web_search_20250305" in refused.value.body["error"]["message"]


def test_count_tokens_is_anthropics_own_count_where_the_deployment_is_anthropic(claude: anthropic.Anthropic) -> None:
    body = {"system": "Be brief.", "messages": [{"role": "user", "content": "How many tokens is this, exactly?"}]}
    raw = claude.messages.with_raw_response.count_tokens(model="chat-anthropic", **body)
    answered = claude.messages.create(model="chat-anthropic", max_tokens=16, **body)
    assert raw.headers["x-fb-token-count"] == "provider" and raw.parse().input_tokens == answered.usage.input_tokens
    estimated = claude.messages.with_raw_response.count_tokens(model="chat-openai", **body)
    assert estimated.headers["x-fb-token-count"] == "estimate" and estimated.parse().input_tokens > 0
