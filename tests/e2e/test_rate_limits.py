"""Rate limits end to end, through the openai SDK: 429 codes, Retry-After, x-ratelimit-* headers."""

from __future__ import annotations

import openai
import pytest

from tests.harness import Stack, mint, wait_key_live

pytestmark = pytest.mark.e2e

MSG = [{"role": "user", "content": "rate me"}]


def client_for(stack: Stack, *limits: str) -> openai.OpenAI:
    key = mint(stack.config, "platform", "playground", "chat-openai", *limits)
    wait_key_live(stack.gateway_url, key)
    return openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=key, max_retries=0)


def test_requests_per_minute(stack: Stack) -> None:
    with client_for(stack, "--rpm", "3") as client:
        raws = [client.chat.completions.with_raw_response.create(model="chat-openai", messages=MSG,
                                                                   max_completion_tokens=5) for _ in range(2)]
        # wait_key_live spent one request from the bucket (GET /v1/models is not limited): 3 left before these
        assert raws[-1].headers["x-ratelimit-limit-requests"] == "3"
        assert int(raws[-1].headers["x-ratelimit-remaining-requests"]) in (0, 1)
        with pytest.raises(openai.RateLimitError) as err:
            for _ in range(3):
                client.chat.completions.create(model="chat-openai", messages=MSG, max_completion_tokens=5)
    exc = err.value
    assert exc.code == "key_requests_per_minute"
    assert int(exc.response.headers["retry-after"]) >= 1
    assert exc.response.headers["x-ratelimit-remaining-requests"] == "0"
    assert "This key has 0 requests/min left" in exc.message


def test_input_tokens_per_minute_message(stack: Stack) -> None:
    long = [{"role": "user", "content": " ".join(["word"] * 100)}]  # ~163 estimated, 103 actual input tokens
    with client_for(stack, "--input-tpm", "200") as client:
        with pytest.raises(openai.RateLimitError) as err:
            for _ in range(3):
                client.chat.completions.create(model="chat-openai", messages=long, max_completion_tokens=5)
    exc = err.value
    assert exc.code == "key_tokens_per_minute"
    assert "input tokens/min left; the request needs" in exc.message
    assert exc.response.headers["x-ratelimit-limit-tokens"] == "200"
    assert "retry-after" in exc.response.headers


def test_output_cap_larger_than_the_limit_says_waiting_will_not_help(stack: Stack) -> None:
    with client_for(stack, "--output-tpm", "100") as client:
        with pytest.raises(openai.RateLimitError) as err:
            client.chat.completions.create(model="chat-openai", messages=MSG, max_completion_tokens=500)
    exc = err.value
    assert exc.code == "key_tokens_per_minute"
    assert "needs 500 (max output)" in exc.message and "waiting will not help" in exc.message
    assert "retry-after" not in exc.response.headers
