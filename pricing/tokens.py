"""Token estimation fallback: characters / 4 x 1.3, rounded up.

Used for admission holds before a model-family tokenizer is known. It is
deliberately conservative (1.3x) because an under-estimate becomes an overrun.
"""

from __future__ import annotations

from typing import Any

import orjson

# OpenAI's documented chat framing: ~3 tokens per message plus 3 to prime the reply.
PER_MESSAGE_TOKENS = 4
REPLY_PRIMING_TOKENS = 3
# A high-detail 1024x1024 image costs ~765 tokens upstream; a fixed guess beats zero.
IMAGE_PART_TOKENS = 765


def estimate_tokens(text_chars: int) -> int:
    """ceil(chars / 4 x 1.3), in integers (no float rounding)."""
    if text_chars <= 0:
        return 0
    return -(-text_chars * 13 // 40)


def estimate_chat_input(body: dict) -> int:
    """Estimated prompt tokens of a chat completions body (messages, tool calls, tools)."""
    chars, extra = chat_input_chars(body)
    return estimate_tokens(chars) + extra


def raw_tokens(text_chars: int) -> int:
    """ceil(chars / 4): the unpadded chars-per-token count (the fallback's floor)."""
    if text_chars <= 0:
        return 0
    return -(-text_chars // 4)


def chat_input_chars(body: dict) -> tuple[int, int]:
    """(text characters, fixed tokens) of a chat completions body.

    The characters are what the chars/4 rule applies to; the fixed tokens are
    the message framing, the reply priming and the image parts, which are not
    text and are not padded.
    """
    chars = 0
    extra = REPLY_PRIMING_TOKENS
    messages = body.get("messages") or []
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        extra += PER_MESSAGE_TOKENS
        chars += _text_len(message.get("name"))
        content = message.get("content")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict):
                    if part.get("type") in ("image_url", "input_image"):
                        extra += IMAGE_PART_TOKENS
                    chars += _text_len(part.get("text")) + _text_len(part.get("refusal"))
                else:
                    chars += _text_len(part)
        tool_calls = message.get("tool_calls")
        for call in tool_calls if isinstance(tool_calls, list) else []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                chars += _text_len(function.get("name")) + _text_len(function.get("arguments"))
        legacy_call = message.get("function_call")
        if isinstance(legacy_call, dict):
            chars += _text_len(legacy_call.get("name")) + _text_len(legacy_call.get("arguments"))
    for definitions in (body.get("tools"), body.get("functions")):
        if definitions:
            chars += _json_len(definitions)
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        chars += _json_len(response_format.get("json_schema"))
    return chars, extra


def _text_len(value: Any) -> int:
    return len(value) if isinstance(value, str) else 0


def _json_len(value: Any) -> int:
    try:
        return len(orjson.dumps(value).decode())
    except TypeError:
        return len(str(value))
