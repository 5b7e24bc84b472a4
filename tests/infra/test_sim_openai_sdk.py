"""The official ``openai`` SDK parses everything the simulator's OpenAI dialect sends."""

from __future__ import annotations

import math

import jsonschema
import openai
import orjson
import pytest

from tests.infra.test_sim_openai import TOOLS, WEATHER


@pytest.fixture
async def sdk(sim):
    async with openai.AsyncOpenAI(base_url=str(sim.make_url("/v1")), api_key="sk-test", max_retries=0) as client:
        yield client


async def test_sdk_chat_stream_tools_embeddings(sdk):
    msgs = [{"role": "user", "content": "Hello there, simulator!"}]
    resp = await sdk.chat.completions.create(model="gpt-sim", messages=msgs, max_completion_tokens=6)
    assert resp.choices[0].finish_reason == "length" and resp.usage.completion_tokens == 6
    stream = await sdk.chat.completions.create(model="gpt-sim", messages=msgs, stream=True,
                                               stream_options={"include_usage": True}, max_completion_tokens=6)
    chunks = [c async for c in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == resp.choices[0].message.content
    assert chunks[-1].usage.total_tokens == resp.usage.total_tokens
    tool = await sdk.chat.completions.create(model="gpt-sim", messages=msgs, tools=TOOLS, tool_choice="required")
    jsonschema.validate(orjson.loads(tool.choices[0].message.tool_calls[0].function.arguments), WEATHER)
    emb = await sdk.embeddings.create(model="emb-sim", input=["alpha beta"])  # the SDK asks for base64
    vec = emb.data[0].embedding
    assert len(vec) == 256 and math.isclose(sum(v * v for v in vec), 1, rel_tol=1e-5)


async def test_sdk_errors(sdk):
    msgs = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.RateLimitError) as exc:
        await sdk.chat.completions.create(model="gpt-sim", messages=msgs, extra_headers={"x-sim-fault": "429"})
    assert exc.value.code == "rate_limit_exceeded"
    with pytest.raises(openai.BadRequestError) as exc:
        await sdk.chat.completions.create(model="gpt-sim", messages=msgs,
                                          extra_headers={"x-sim-fault": "context_length"})
    assert exc.value.code == "context_length_exceeded"
