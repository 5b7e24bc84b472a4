from pricing.tokens import (
    IMAGE_PART_TOKENS,
    PER_MESSAGE_TOKENS,
    REPLY_PRIMING_TOKENS,
    estimate_chat_input,
    estimate_tokens,
)


def test_estimate_tokens_is_ceil_chars_over_4_times_1_3():
    assert estimate_tokens(0) == 0
    assert estimate_tokens(1) == 1
    assert estimate_tokens(40) == 13
    assert estimate_tokens(41) == 14
    assert estimate_tokens(4000) == 1300
    for chars in range(0, 2000):
        assert estimate_tokens(chars) * 40 >= chars * 13 > (estimate_tokens(chars) - 1) * 40


def test_chat_counts_strings_parts_tool_calls_and_tools():
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    body = {
        "model": "chat-default",
        "messages": [
            {"role": "system", "content": "x" * 40},
            {"role": "user", "content": [{"type": "text", "text": "y" * 40}, {"type": "image_url", "image_url": {"url": "u"}}]},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ],
        "tools": tools,
    }
    import orjson

    chars = 40 + 40 + len("f") + len("{}") + len("ok") + len(orjson.dumps(tools))
    expected = estimate_tokens(chars) + 4 * PER_MESSAGE_TOKENS + REPLY_PRIMING_TOKENS + IMAGE_PART_TOKENS
    assert estimate_chat_input(body) == expected


def test_malformed_bodies_do_not_crash():
    assert estimate_chat_input({}) == REPLY_PRIMING_TOKENS
    assert estimate_chat_input({"messages": "nope"}) == REPLY_PRIMING_TOKENS
    assert estimate_chat_input({"messages": [None, {"content": 5}]}) == REPLY_PRIMING_TOKENS + PER_MESSAGE_TOKENS
