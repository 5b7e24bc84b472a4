"""The simulator's Anthropic Messages dialect: shapes, SSE state machine, tools, stop sequences."""

from __future__ import annotations

import jsonschema
import orjson

from tests.infra.sim_helpers import AN, msg_body, sse_json
from tests.infra.test_sim_openai import WEATHER

TOOLS = [{"name": "get_weather", "description": "Weather for a city", "input_schema": WEATHER},
         {"name": "noop", "input_schema": {"type": "object", "properties": {}}}]


async def test_non_stream_shape(sim):
    resp = await sim.post("/v1/messages", json=msg_body(system="Be brief."), headers=AN)
    assert resp.status == 200 and resp.headers["request-id"]
    body = await resp.json()
    assert body["id"].startswith("msg_") and body["type"] == "message" and body["role"] == "assistant"
    assert body["model"] == "claude-sim" and body["stop_reason"] == "end_turn" and body["stop_sequence"] is None
    (block,) = body["content"]
    assert block["type"] == "text" and len(block["text"].split(" ")) == 32
    # 5 tokens + "Be brief." 3 tokens + 3 framing x (1 message + system)
    assert body["usage"] == {"input_tokens": 14, "cache_creation_input_tokens": 0,
                             "cache_read_input_tokens": 0, "output_tokens": 32,
                             "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
                             "service_tier": "standard"}


async def test_stream_event_sequence(sim):
    resp = await sim.post("/v1/messages", json=msg_body(stream=True, max_tokens=3), headers=AN)
    assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
    events = sse_json(await resp.text())
    names = [e for e, _ in events]
    assert names == ["message_start", "content_block_start", "ping", "content_block_delta",
                     "content_block_delta", "content_block_delta", "content_block_stop", "message_delta",
                     "message_stop"]
    assert all(d["type"] == e for e, d in events)
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["input_tokens"] == 8 and start["usage"]["output_tokens"] == 1
    assert events[1][1] == {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    assert all(d["delta"]["type"] == "text_delta" and d["index"] == 0 for _, d in events[3:6])
    delta = events[7][1]
    assert delta["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert delta["usage"] == {"output_tokens": 3}
    plain = await (await sim.post("/v1/messages", json=msg_body(max_tokens=3), headers=AN)).json()
    assert plain["content"][0]["text"] == "".join(d["delta"]["text"] for _, d in events[3:6])


async def test_required_fields_and_headers(sim):
    body = msg_body()
    del body["max_tokens"]
    resp = await sim.post("/v1/messages", json=body, headers=AN)
    err = await resp.json()
    assert resp.status == 400 and err["type"] == "error"
    assert err["error"]["type"] == "invalid_request_error" and "max_tokens" in err["error"]["message"]
    resp = await sim.post("/v1/messages", json=msg_body(), headers={"x-api-key": "sk-test"})
    assert resp.status == 400 and "anthropic-version" in (await resp.json())["error"]["message"]
    resp = await sim.post("/v1/messages", json=msg_body(stream_options={"include_usage": True}), headers=AN)
    assert resp.status == 400 and "stream_options" in (await resp.json())["error"]["message"]


async def test_tool_use_non_stream_satisfies_schema(sim):
    body = msg_body(tools=TOOLS, tool_choice={"type": "any"})
    out = await (await sim.post("/v1/messages", json=body, headers=AN)).json()
    assert out["stop_reason"] == "tool_use"
    (block,) = out["content"]
    assert block["type"] == "tool_use" and block["id"].startswith("toolu_") and block["name"] == "get_weather"
    jsonschema.validate(block["input"], WEATHER)


async def test_tool_use_stream_partial_json(sim):
    body = msg_body(tools=TOOLS, tool_choice={"type": "tool", "name": "get_weather"}, stream=True)
    events = sse_json(await (await sim.post("/v1/messages", json=body, headers=AN)).text())
    start = events[1][1]["content_block"]
    assert start["type"] == "tool_use" and start["name"] == "get_weather" and start["input"] == {}
    assert events[2][0] == "ping"
    deltas = [d["delta"] for e, d in events if e == "content_block_delta"]
    assert all(d["type"] == "input_json_delta" for d in deltas) and deltas[0]["partial_json"] == ""
    jsonschema.validate(orjson.loads("".join(d["partial_json"] for d in deltas)), WEATHER)
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"
    assert events[-2][1]["usage"]["output_tokens"] == len(deltas) - 1


async def test_tool_choice_auto_and_tool_result(sim):
    out = await (await sim.post("/v1/messages", json=msg_body(tools=TOOLS), headers=AN)).json()
    assert out["stop_reason"] == "end_turn" and out["content"][0]["type"] == "text"
    msgs = [{"role": "user", "content": "weather?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                               "input": {"city": "Pune"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]}]
    body = {"model": "claude-sim", "max_tokens": 50, "messages": msgs, "tools": TOOLS,
            "tool_choice": {"type": "any"}}
    out = await (await sim.post("/v1/messages", json=body, headers=AN)).json()
    assert out["stop_reason"] == "end_turn"
    out = await (await sim.post("/v1/messages", json=msg_body(tools=TOOLS),
                                headers={**AN, "x-sim-tool-call": "noop"})).json()
    assert out["content"][0] == {"type": "tool_use", "id": out["content"][0]["id"], "name": "noop", "input": {}}


async def test_stop_sequences(sim):
    text = (await (await sim.post("/v1/messages", json=msg_body(), headers=AN)).json())["content"][0]["text"]
    stop = " " + text.split(" ")[4]
    out = await (await sim.post("/v1/messages", json=msg_body(stop_sequences=["zzz", stop]), headers=AN)).json()
    assert out["stop_reason"] == "stop_sequence" and out["stop_sequence"] == stop
    assert text.startswith(out["content"][0]["text"]) and stop not in out["content"][0]["text"]


async def test_cache_usage_and_system_blocks(sim):
    body = msg_body(system=[{"type": "text", "text": "Be brief."}])
    headers = {**AN, "x-sim-cached-tokens": "4", "x-sim-cache-write-tokens": "3", "x-sim-reasoning-tokens": "2"}
    out = await (await sim.post("/v1/messages", json=body, headers=headers)).json()
    assert out["usage"] == {"input_tokens": 14 - 4 - 3, "cache_creation_input_tokens": 3,
                            "cache_read_input_tokens": 4, "output_tokens": 34,
                            "cache_creation": {"ephemeral_5m_input_tokens": 3, "ephemeral_1h_input_tokens": 0},
                            "service_tier": "standard"}
    stream = sse_json(await (await sim.post("/v1/messages", json={**body, "stream": True},
                                            headers=headers)).text())
    assert stream[0][1]["message"]["usage"]["cache_read_input_tokens"] == 4
    assert stream[-2][1]["usage"]["output_tokens"] == 34


async def test_content_blocks_with_images_count(sim):
    content = [{"type": "text", "text": "what is this"},
               {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]
    out = await (await sim.post("/v1/messages", json=msg_body(content), headers=AN)).json()
    assert out["usage"]["input_tokens"] == 3 + 85 + 3


async def test_extended_thinking_answers_a_signed_block_and_checks_it_when_passed_back(sim):
    body = msg_body(max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 1024})
    out = await (await sim.post("/v1/messages", json=body, headers=AN)).json()
    thinking, text = out["content"]
    assert thinking["type"] == "thinking" and thinking["thinking"] and thinking["signature"]
    assert text["type"] == "text" and out["usage"]["output_tokens"] == 32 + 24  # thinking is billed as output
    events = sse_json(await (await sim.post("/v1/messages", json={**body, "stream": True}, headers=AN)).text())
    deltas = [data["delta"] for kind, data in events if kind == "content_block_delta" and data["index"] == 0]
    assert [d["type"] for d in deltas] == ["thinking_delta", "signature_delta"]
    assert deltas[0]["thinking"] == thinking["thinking"] and deltas[1]["signature"] == thinking["signature"]
    assert {data["index"] for kind, data in events if kind == "content_block_delta"} == {0, 1}
    turn = {**body, "messages": [body["messages"][0], {"role": "assistant", "content": out["content"]},
                                 {"role": "user", "content": "Go on."}]}
    assert (await sim.post("/v1/messages", json=turn, headers=AN)).status == 200
    forged = dict(thinking, thinking=thinking["thinking"] + " (edited)")
    turn["messages"][1] = {"role": "assistant", "content": [forged, text]}
    refused = await sim.post("/v1/messages", json=turn, headers=AN)
    assert refused.status == 400 and "signature" in (await refused.json())["error"]["message"]
    for bad in ({"type": "enabled", "budget_tokens": 100}, {"type": "enabled", "budget_tokens": 4096}, {"type": "x"}):
        assert (await sim.post("/v1/messages", json={**body, "thinking": bad}, headers=AN)).status == 400


async def test_cache_control_writes_a_prefix_then_reads_it(sim):
    long = "The policy handbook says many things. " * 200  # well over 1,024 tokens
    system = [{"type": "text", "text": long, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    first = (await (await sim.post("/v1/messages", json=msg_body(system=system), headers=AN)).json())["usage"]
    assert first["cache_creation_input_tokens"] > 1024 and first["cache_read_input_tokens"] == 0
    assert first["cache_creation"] == {"ephemeral_5m_input_tokens": 0,
                                       "ephemeral_1h_input_tokens": first["cache_creation_input_tokens"]}
    again = (await (await sim.post("/v1/messages", json=msg_body(system=system, messages=[
        {"role": "user", "content": "Another question."}]), headers=AN)).json())["usage"]
    assert again["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    assert again["cache_creation_input_tokens"] == 0
    short = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    small = (await (await sim.post("/v1/messages", json=msg_body(system=short), headers=AN)).json())["usage"]
    assert small["cache_creation_input_tokens"] == 0 and small["cache_read_input_tokens"] == 0  # under the minimum
    bad = [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "ttl": "2h"}}]
    assert (await sim.post("/v1/messages", json=msg_body(system=bad), headers=AN)).status == 400


async def test_a_moving_breakpoint_reads_what_the_turn_before_wrote(sim):
    long = "The policy handbook says many things. " * 200
    system = [{"type": "text", "text": long, "cache_control": {"type": "ephemeral"}}]
    turn1 = [{"role": "user", "content": [{"type": "text", "text": "First question. " * 100,
                                          "cache_control": {"type": "ephemeral"}}]}]
    first = (await (await sim.post("/v1/messages", json=msg_body(system=system, messages=turn1),
                                   headers=AN)).json())["usage"]
    turn2 = [{"role": "user", "content": [{"type": "text", "text": "First question. " * 100}]},
             {"role": "assistant", "content": "An answer."},
             {"role": "user", "content": [{"type": "text", "text": "Second.", "cache_control": {"type": "ephemeral"}}]}]
    second = (await (await sim.post("/v1/messages", json=msg_body(system=system, messages=turn2),
                                    headers=AN)).json())["usage"]
    assert first["cache_read_input_tokens"] == 0 and first["cache_creation_input_tokens"] > 1024
    # turn 2 reads the system breakpoint's prefix (turn 1's message breakpoint is not one of its own)
    assert 1024 < second["cache_read_input_tokens"] < first["cache_creation_input_tokens"]
    assert second["cache_creation_input_tokens"] > 0
