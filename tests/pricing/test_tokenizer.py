"""Exact OpenAI-family counts via bpe-openai (offline)."""

import pytest

from pricing import tokenizer
from pricing.tokenizer import (
    CL100K_BASE,
    LOW_DETAIL_IMAGE_TOKENS,
    O200K_BASE,
    UnknownEncodingError,
    count_chat_input,
    count_tokens,
    encoding_for_model,
)
from pricing.tokens import IMAGE_PART_TOKENS

# Token ids are the published o200k / cl100k ones (identical to tiktoken's).
KNOWN = [
    ("hello world", O200K_BASE, 2),
    ("hello world", CL100K_BASE, 2),
    ("Hello, world!", O200K_BASE, 4),
    ("Hello, world!", CL100K_BASE, 4),
    ("You are a helpful assistant.", O200K_BASE, 6),
    ("日本語のテキスト", O200K_BASE, 6),
    ("日本語のテキスト", CL100K_BASE, 8),
    ("<|endoftext|>", O200K_BASE, 7),  # a special-token string in user text is plain text
    ("", O200K_BASE, 0),
]


@pytest.mark.parametrize(("text", "encoding", "expected"), KNOWN)
def test_known_counts(text, encoding, expected):
    assert count_tokens(text, encoding) == expected


def test_known_ids_match_the_published_vocabularies():
    _bindings = tokenizer._load_bindings()
    assert _bindings.tokenizer_for_encoding(O200K_BASE).encode("hello world") == [24912, 2375]
    assert _bindings.tokenizer_for_encoding(CL100K_BASE).encode("hello world") == [15339, 1917]
    assert _bindings.tokenizer_for_encoding(CL100K_BASE).encode("Hello, world!") == [9906, 11, 1917, 0]


def test_long_strings_are_memoised_and_still_exact():
    text = "The quick brown fox jumps over the lazy dog. " * 40
    tokenizer.configure_cache()
    first = count_tokens(text, O200K_BASE)
    assert tokenizer.cache_stats()["misses"] == 1
    assert count_tokens(text, O200K_BASE) == first
    assert tokenizer.cache_stats()["hits"] == 1
    assert count_tokens(text, CL100K_BASE) == tokenizer._counter(CL100K_BASE)(text)
    tokenizer.configure_cache(max_chars=0)
    assert count_tokens(text, O200K_BASE) == first
    tokenizer.configure_cache()


def test_count_cache_is_bounded_by_characters():
    tokenizer.configure_cache(max_chars=10_000, max_entries=1_000)
    try:
        for i in range(100):
            count_tokens(f"{i} " + "word " * 100, O200K_BASE)
        stats = tokenizer.cache_stats()
        assert stats["chars"] <= 10_000
        assert 0 < stats["entries"] < 100
    finally:
        tokenizer.configure_cache()


def test_lone_surrogates_do_not_crash():
    assert count_tokens("a\ud800b", O200K_BASE) > 0


# OpenAI cookbook "How to count tokens with tiktoken": the API itself reported
# 129 prompt tokens for these messages on gpt-3.5-turbo / gpt-4 and 124 on gpt-4o / gpt-4o-mini.
COOKBOOK_MESSAGES = [
    {"role": "system", "content": "You are a helpful, pattern-following assistant that translates corporate jargon into plain English."},
    {"role": "system", "name": "example_user", "content": "New synergies will help drive top-line growth."},
    {"role": "system", "name": "example_assistant", "content": "Things working well together will increase revenue."},
    {"role": "system", "name": "example_user", "content": "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage."},
    {"role": "system", "name": "example_assistant", "content": "Let's talk later when we're less busy about how to do better."},
    {"role": "user", "content": "This late pivot means we don't have time to boil the ocean for the client deliverable."},
]


def test_chat_framing_matches_api_reported_prompt_tokens():
    assert count_chat_input({"messages": COOKBOOK_MESSAGES}, CL100K_BASE) == 129
    assert count_chat_input({"messages": COOKBOOK_MESSAGES}, O200K_BASE) == 124


def test_chat_framing_arithmetic():
    # 3 priming + per message (3 + role + content) + name (+1 + its tokens)
    body = {"messages": [{"role": "user", "content": "hello world"}]}
    assert count_chat_input(body, O200K_BASE) == 3 + 3 + 1 + 2
    named = {"messages": [{"role": "user", "name": "example_user", "content": "hello world"}]}
    assert count_chat_input(named, O200K_BASE) == 3 + 3 + 1 + 2 + 2 + 1
    assert count_chat_input({}, O200K_BASE) == 3


# Same cookbook, tools section: the API reported 105 (gpt-4) / 101 (gpt-4o) prompt
# tokens. Counting the tool JSON over-counts OpenAI's rendering: safe for a hold.
WEATHER_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_current_weather",
            "description": "Get the current weather in a given location",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                    "unit": {"type": "string", "description": "The unit of temperature to return", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["location"],
            },
        },
    }
]
WEATHER_MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant that can answer to questions about the weather."},
    {"role": "user", "content": "What's the weather like in San Francisco?"},
]


def test_tool_definitions_count_as_json_and_do_not_undercount_the_api():
    import orjson

    body = {"messages": WEATHER_MESSAGES, "tools": WEATHER_TOOLS}
    for encoding, api_reported in ((CL100K_BASE, 105), (O200K_BASE, 101)):
        without = count_chat_input({"messages": WEATHER_MESSAGES}, encoding)
        total = count_chat_input(body, encoding)
        assert total - without == count_tokens(orjson.dumps(WEATHER_TOOLS).decode(), encoding)
        assert api_reported <= total <= api_reported * 1.25


def test_tool_calls_parts_and_images():
    enc = O200K_BASE
    args = '{"city":"Paris"}'
    body = {
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "hello world"},
                {"type": "image_url", "image_url": {"url": "data:,", "detail": "low"}},
                {"type": "image_url", "image_url": {"url": "data:,"}},
            ]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": args}},
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        ]
    }
    expected = (
        3
        + 3 + 1 + 2 + LOW_DETAIL_IMAGE_TOKENS + IMAGE_PART_TOKENS
        + 3 + 1 + count_tokens("get_weather", enc) + count_tokens(args, enc)
        + 3 + 1 + count_tokens("c1", enc) + count_tokens("sunny", enc)
    )
    assert count_chat_input(body, enc) == expected
    assert count_chat_input(body, enc, image_tokens=1000) == expected - IMAGE_PART_TOKENS + 1000


def test_response_format_schema_and_legacy_functions_are_counted():
    schema = {"name": "s", "schema": {"type": "object"}}
    base = {"messages": [{"role": "user", "content": "hi"}]}
    with_schema = {**base, "response_format": {"type": "json_schema", "json_schema": schema}}
    assert count_chat_input(with_schema, O200K_BASE) > count_chat_input(base, O200K_BASE)
    legacy = {**base, "functions": [{"name": "f", "parameters": {"type": "object"}}]}
    assert count_chat_input(legacy, O200K_BASE) > count_chat_input(base, O200K_BASE)


def test_malformed_bodies_do_not_crash():
    for body in (
        {"messages": "nope"},
        {"messages": [None, 5, {"content": 5}, {"content": [None, 3, {"type": "image_url", "image_url": "x"}]}]},
        {"messages": [{"role": "assistant", "tool_calls": "x", "function_call": {"arguments": {"a": 1}}}]},
        {"tools": {"not": "a list"}},
    ):
        assert count_chat_input(body, O200K_BASE) >= 3


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("gpt-4o", O200K_BASE),
        ("gpt-4o-mini-2024-07-18", O200K_BASE),
        ("chatgpt-4o-latest", O200K_BASE),
        ("gpt-4.1-nano", O200K_BASE),
        ("gpt-4.5-preview", O200K_BASE),
        ("gpt-5", O200K_BASE),
        ("GPT-5-mini", O200K_BASE),
        ("o1", O200K_BASE),
        ("o1-mini", O200K_BASE),
        ("o3-mini-2025-01-31", O200K_BASE),
        ("o4-mini", O200K_BASE),
        ("openai/gpt-4o", O200K_BASE),
        ("ft:gpt-4o-mini-2024-07-18:org::abc", O200K_BASE),
        ("gpt-4", CL100K_BASE),
        ("gpt-4-turbo", CL100K_BASE),
        ("gpt-4-0613", CL100K_BASE),
        ("gpt-3.5-turbo", CL100K_BASE),
        ("gpt-35-turbo", CL100K_BASE),
        ("claude-3-5-sonnet", None),
        ("llama-3.1-70b", None),
        ("o2", None),
        ("omni-moderation", None),
        ("", None),
        (None, None),
    ],
)
def test_model_to_encoding(model, expected):
    assert encoding_for_model(model) == expected


def test_explicit_encoding_wins_and_is_validated():
    assert encoding_for_model("llama-3.1-70b", explicit="o200k_base") == O200K_BASE
    assert encoding_for_model("gpt-4o", explicit="CL100K_BASE") == CL100K_BASE
    with pytest.raises(UnknownEncodingError):
        encoding_for_model("gpt-4o", explicit="p50k_base")
    with pytest.raises(UnknownEncodingError):
        count_tokens("x", "nope")


def test_loading_skips_the_wrapper_package_that_decodes_every_vocabulary():
    import subprocess
    import sys

    code = (
        "import sys, warnings; warnings.simplefilter('error');"
        "from pricing.tokenizer import count_tokens;"
        "assert count_tokens('hello world', 'o200k_base') == 2;"
        "assert 'bpe_openai' not in sys.modules and 'bpe_openai._bindings' in sys.modules"
    )
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, cwd=root)


def test_encoders_load_once_and_are_reused():
    tokenizer.preload()
    assert set(tokenizer.loaded_encodings()) >= {O200K_BASE, CL100K_BASE}
    first = tokenizer._counter(O200K_BASE)
    assert tokenizer._counter(O200K_BASE) is first
