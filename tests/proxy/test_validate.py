"""Request validation: each malformed body names the parameter at fault."""

from __future__ import annotations

import orjson
import pytest

from proxy.api.validate import validate_chat, validate_embeddings
from proxy.body import MAX_DEPTH, parse_json_object
from proxy.errors import InvalidRequest

MSG = [{"role": "user", "content": "hi"}]


def test_valid_chat_call() -> None:
    call = validate_chat({"model": "a", "messages": MSG, "stream": True, "stream_options": {"include_usage": True},
                          "max_tokens": 5})
    assert call.alias == "a" and call.stream and call.include_usage and call.requested_max_output == 5


def test_max_completion_tokens_wins_over_legacy() -> None:
    call = validate_chat({"model": "a", "messages": MSG, "max_tokens": 5, "max_completion_tokens": 9})
    assert call.requested_max_output == 9


@pytest.mark.parametrize("raw", [b"", b"  ", b"{", b"null", b'"s"', b"[]", b"\xff"])
def test_not_a_json_object(raw: bytes) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_json_object(raw)
    assert err.value.code == "invalid_json" and err.value.status == 400


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "a", "messages": [{"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]}]},
         "messages[0].tool_calls[0]"),
        ({"model": "a", "messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
        ({"model": "a", "messages": [{"role": "user", "content": []}]}, "messages[0].content"),
        ({"model": "a", "messages": [{"role": "user", "content": [{"type": "video"}]}]}, "messages[0].content[0]"),
        ({"model": "a", "messages": MSG, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"model": "a", "messages": MSG, "tools": [{"type": "function", "function": {"name": "f"}}],
          "tool_choice": {"type": "function", "function": {"name": "g"}}}, "tool_choice"),
        ({"model": "a", "messages": MSG, "response_format": {"type": "json_schema"}}, "response_format.json_schema"),
        ({"model": "a", "messages": MSG, "top_p": 1.5}, "top_p"),
        ({"model": "a", "messages": MSG, "n": True}, "n"),
    ],
)
def test_bad_chat_fields(body: dict, param: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        validate_chat(body)
    assert err.value.param == param


def test_assistant_tool_call_message_without_content_is_valid() -> None:
    validate_chat({"model": "a", "messages": [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "{}"},
    ]})


@pytest.mark.parametrize(
    ("inp", "ok"),
    [("text", True), (["a", "b"], True), ([1, 2, 3], True), ([[1, 2], [3]], True),
     ([], False), ([""], False), ([1.5], False), ({"a": 1}, False), (None, False)],
)
def test_embeddings_input(inp, ok: bool) -> None:
    body = {"model": "e", "input": inp} if inp is not None else {"model": "e"}
    if ok:
        assert validate_embeddings(body).texts
    else:
        with pytest.raises(InvalidRequest) as err:
            validate_embeddings(body)
        assert err.value.param == "input"


def test_nesting_deeper_than_the_limit_is_refused() -> None:
    ok = {"model": "a", "metadata": [[]] * 3}
    for _ in range(MAX_DEPTH - 3):
        ok = {"x": ok}
    assert parse_json_object(orjson.dumps(ok)) == ok
    deep = b'{"a": ' + b"[" * MAX_DEPTH + b"]" * MAX_DEPTH + b"}"
    with pytest.raises(InvalidRequest) as err:
        parse_json_object(deep)
    assert err.value.code == "invalid_json" and "deeper than" in err.value.message


@pytest.mark.parametrize("n", [0, 129, 2**63])
def test_n_out_of_range(n: int) -> None:
    with pytest.raises(InvalidRequest) as err:
        validate_chat({"model": "a", "messages": MSG, "n": n})
    assert err.value.param == "n"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "a", "messages": [{"role": [], "content": "x"}]}, "messages[0].role"),
        ({"model": "a", "messages": [{"role": {}, "content": "x"}]}, "messages[0].role"),
        ({"model": "a", "messages": [{"role": "user", "content": [{"type": ["text"]}]}]}, "messages[0].content[0]"),
        ({"model": "a", "messages": MSG, "response_format": {"type": {"a": 1}}}, "response_format"),
    ],
)
def test_unhashable_values_where_a_name_is_expected(body: dict, param: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        validate_chat(body)
    assert err.value.param == param
