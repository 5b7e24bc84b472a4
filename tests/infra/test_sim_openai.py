"""The simulator's OpenAI dialect: chat shapes (stream and not), tools, structured output, embeddings."""

from __future__ import annotations

import math

import jsonschema
import orjson

from infra.simulator.embeddings import decode_base64
from tests.infra.sim_helpers import OA, chat_body, sse_json

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 3},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "hourly": {"type": "boolean"},
        "ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
        "geo": {"type": "object", "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
                "required": ["lat", "lon"], "additionalProperties": False},
        "kind": {"const": "forecast"},
    },
    "required": ["city", "unit", "days", "geo", "kind", "tags"],
    "additionalProperties": False,
}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "noop", "parameters": {"type": "object"}}}]


async def test_non_stream_shape(sim):
    resp = await sim.post("/v1/chat/completions", json=chat_body(), headers=OA)
    assert resp.status == 200
    assert resp.headers["x-request-id"]
    body = await resp.json()
    assert body["object"] == "chat.completion" and body["model"] == "gpt-sim"
    assert body["id"].startswith("chatcmpl-") and isinstance(body["created"], int)
    (choice,) = body["choices"]
    assert choice["index"] == 0 and choice["finish_reason"] == "stop" and choice["logprobs"] is None
    assert choice["message"]["role"] == "assistant" and choice["message"]["refusal"] is None
    assert len(choice["message"]["content"].split(" ")) == 32
    # "Hello there, simulator!" -> Hello, there, ",", simulator, "!" = 5 tokens + 3 framing
    assert body["usage"] == {"prompt_tokens": 8, "completion_tokens": 32, "total_tokens": 40,
                             "prompt_tokens_details": {"cached_tokens": 0},
                             "completion_tokens_details": {"reasoning_tokens": 0}}


async def test_stream_events_in_order_with_usage(sim):
    body = chat_body(stream=True, stream_options={"include_usage": True}, max_completion_tokens=4)
    resp = await sim.post("/v1/chat/completions", json=body, headers=OA)
    assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
    events = [d for _, d in sse_json(await resp.text())]
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": "", "refusal": None}
    deltas = [c["choices"][0]["delta"]["content"] for c in chunks[1:5]]
    assert len(deltas) == 4 and deltas[0] and all(d.startswith(" ") for d in deltas[1:])
    assert chunks[5]["choices"][0]["delta"] == {} and chunks[5]["choices"][0]["finish_reason"] == "length"
    assert all(c["usage"] is None for c in chunks[:6])
    assert chunks[6]["choices"] == [] and chunks[6]["usage"]["completion_tokens"] == 4
    assert len(chunks) == 7
    # same answer as the non-stream call
    plain = await (await sim.post("/v1/chat/completions", json=chat_body(max_completion_tokens=4),
                                  headers=OA)).json()
    assert plain["choices"][0]["message"]["content"] == "".join(deltas)
    assert plain["usage"] == chunks[6]["usage"]


async def test_stream_without_include_usage_has_no_usage_chunk(sim):
    resp = await sim.post("/v1/chat/completions", json=chat_body(stream=True), headers=OA)
    chunks = [d for _, d in sse_json(await resp.text())][:-1]
    assert all("usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop" and len(chunks) == 1 + 32 + 1


async def test_legacy_max_tokens_and_n(sim):
    body = (await (await sim.post("/v1/chat/completions", json=chat_body(max_tokens=3), headers=OA)).json())
    assert body["choices"][0]["finish_reason"] == "length" and body["usage"]["completion_tokens"] == 3
    resp = await sim.post("/v1/chat/completions", json=chat_body(n=2), headers=OA)
    assert resp.status == 400 and (await resp.json())["error"]["param"] == "n"


async def test_unknown_parameter_and_bad_json_rejected(sim):
    resp = await sim.post("/v1/chat/completions", json=chat_body(bogus=1), headers=OA)
    err = (await resp.json())["error"]
    assert resp.status == 400 and err["type"] == "invalid_request_error" and err["param"] == "bogus"
    resp = await sim.post("/v1/chat/completions", data=b"{nope", headers=OA)
    assert resp.status == 400


async def test_tool_call_non_stream_satisfies_schema(sim):
    body = chat_body(tools=TOOLS, tool_choice="required")
    out = await (await sim.post("/v1/chat/completions", json=body, headers=OA)).json()
    choice = out["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather"
    jsonschema.validate(orjson.loads(call["function"]["arguments"]), WEATHER)


async def test_tool_call_stream_fragments_reassemble(sim):
    body = chat_body(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}},
                     stream=True, stream_options={"include_usage": True})
    chunks = [d for _, d in sse_json(await (await sim.post("/v1/chat/completions", json=body, headers=OA)).text())]
    assert chunks.pop() == "[DONE]"
    first = chunks[0]["choices"][0]["delta"]
    (head,) = first["tool_calls"]
    assert head["index"] == 0 and head["id"].startswith("call_") and head["type"] == "function"
    assert head["function"] == {"name": "get_weather", "arguments": ""}
    frags = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks[1:-2]]
    assert all(set(f) == {"index", "function"} and set(f["function"]) == {"arguments"} for f in frags)
    args = orjson.loads("".join(f["function"]["arguments"] for f in frags))
    jsonschema.validate(args, WEATHER)
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["usage"]["completion_tokens"] == len(frags)


async def test_tool_choice_auto_and_tool_result_give_text(sim):
    out = await (await sim.post("/v1/chat/completions", json=chat_body(tools=TOOLS), headers=OA)).json()
    assert out["choices"][0]["finish_reason"] == "stop" and out["choices"][0]["message"]["content"]
    msgs = [{"role": "user", "content": "weather?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    body = {"model": "gpt-sim", "messages": msgs, "tools": TOOLS, "tool_choice": "required"}
    out = await (await sim.post("/v1/chat/completions", json=body, headers=OA)).json()
    assert out["choices"][0]["finish_reason"] == "stop"
    # the header forces a call even then
    out = await (await sim.post("/v1/chat/completions", json=body,
                                headers={**OA, "x-sim-tool-call": "noop"})).json()
    assert out["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "noop"


async def test_json_schema_and_json_object(sim):
    rf = {"type": "json_schema", "json_schema": {"name": "w", "schema": WEATHER, "strict": True}}
    out = await (await sim.post("/v1/chat/completions", json=chat_body(response_format=rf), headers=OA)).json()
    jsonschema.validate(orjson.loads(out["choices"][0]["message"]["content"]), WEATHER)
    rf = {"type": "json_object"}
    resp = await sim.post("/v1/chat/completions", json=chat_body("answer in JSON", response_format=rf), headers=OA)
    assert isinstance(orjson.loads((await resp.json())["choices"][0]["message"]["content"]), dict)
    resp = await sim.post("/v1/chat/completions", json=chat_body("no keyword", response_format=rf), headers=OA)
    assert resp.status == 400


async def test_stop_sequence(sim):
    text = (await (await sim.post("/v1/chat/completions", json=chat_body(), headers=OA)).json())[
        "choices"][0]["message"]["content"]
    word = text.split(" ")[5]
    out = await (await sim.post("/v1/chat/completions", json=chat_body(stop=[f" {word}"]), headers=OA)).json()
    content = out["choices"][0]["message"]["content"]
    assert out["choices"][0]["finish_reason"] == "stop"
    assert text.startswith(content) and f" {word}" not in content
    assert out["usage"]["completion_tokens"] == len(content.split(" "))


async def test_usage_headers_and_determinism(sim):
    headers = {**OA, "x-sim-cached-tokens": "5", "x-sim-reasoning-tokens": "7", "x-sim-output-tokens": "10",
               "x-sim-cache-write-tokens": "2"}
    a = await (await sim.post("/v1/chat/completions", json=chat_body(), headers=headers)).json()
    b = await (await sim.post("/v1/chat/completions", json=chat_body(), headers=headers)).json()
    assert a["choices"] == b["choices"] and a["usage"] == b["usage"]
    assert a["usage"]["prompt_tokens_details"]["cached_tokens"] == 5
    assert a["usage"]["completion_tokens"] == 17
    assert a["usage"]["completion_tokens_details"]["reasoning_tokens"] == 7
    capped = await (await sim.post("/v1/chat/completions", json=chat_body(),
                                   headers={**OA, "x-sim-cached-tokens": "999"})).json()
    assert capped["usage"]["prompt_tokens_details"]["cached_tokens"] == capped["usage"]["prompt_tokens"] == 8
    other = await (await sim.post("/v1/chat/completions", json=chat_body("Something else"), headers=OA)).json()
    assert other["choices"][0]["message"]["content"] != a["choices"][0]["message"]["content"]
    resp = await sim.post("/v1/chat/completions", json=chat_body(), headers={**OA, "x-sim-output-tokens": "x"})
    assert resp.status == 400


async def test_embeddings(sim):
    body = {"model": "emb-sim", "input": ["alpha beta", "gamma"]}
    out = await (await sim.post("/v1/embeddings", json=body, headers=OA)).json()
    assert out["object"] == "list" and out["model"] == "emb-sim"
    assert out["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    e0, e1 = out["data"]
    assert e0["object"] == "embedding" and e0["index"] == 0 and e1["index"] == 1
    assert len(e0["embedding"]) == 256 and math.isclose(sum(v * v for v in e0["embedding"]), 1, rel_tol=1e-5)
    again = await (await sim.post("/v1/embeddings", json={"model": "emb-sim", "input": "alpha beta"},
                                  headers=OA)).json()
    assert again["data"][0]["embedding"] == e0["embedding"]
    b64 = await (await sim.post("/v1/embeddings", headers=OA, json={
        "model": "emb-sim", "input": "alpha beta", "encoding_format": "base64"})).json()
    assert decode_base64(b64["data"][0]["embedding"]) == e0["embedding"]
    small = await (await sim.post("/v1/embeddings", headers=OA, json={
        "model": "emb-sim", "input": [[1, 2, 3]], "dimensions": 8})).json()
    assert len(small["data"][0]["embedding"]) == 8 and small["usage"]["prompt_tokens"] == 3
    resp = await sim.post("/v1/embeddings", json={"model": "emb-sim", "input": ""}, headers=OA)
    assert resp.status == 400
