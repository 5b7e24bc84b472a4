"""One contract, run against every dialect, from recorded provider transcripts.

Both recorded text streams say the same words and both tool streams make the
same two calls, so the OpenAI-side result must be identical whichever
provider spoke.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson
import pytest
from upstream_wire import assemble, body, deployment, events, stream, translate, wire

from ledger.usage import TokenUsage
from proxy.errors import (
    UpstreamAuth,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamRejected,
    UpstreamUnavailable,
)
from proxy.upstream.base import UpstreamRequest
from proxy.upstream.credentials.aws import AwsSigner, static_credentials
from proxy.upstream.dialects import DIALECTS, get_dialect
from proxy.upstream.usage_check import UNREPORTED

TEXT = "Hello! How can I help you today? Ünïcödé ✓ 🌍 世界"
CALLS = [
    ("get_weather", {"location": "Paris, France"}),
    ("get_time", {"tz": "Europe/Paris"}),
]


@dataclass(frozen=True)
class Expect:
    text_usage: TokenUsage
    tool_call_ids: tuple[str, str]
    completion_usage: TokenUsage


EXPECT = {
    "openai": Expect(
        text_usage=TokenUsage(input=86, cached_input=1920, output=12),
        tool_call_ids=("call_DdmO9pD3xa9XTPNJ32zg2hcA", "call_ABmO9pD3xa9XTPNJ32zg2hcB"),
        completion_usage=TokenUsage(input=86, cached_input=1920, output=100, reasoning=200),
    ),
    "anthropic": Expect(
        text_usage=TokenUsage(input=86, cached_input=1920, cache_write=64, output=12),
        tool_call_ids=("toolu_01T1x1fJ34qAmk2tNTrN7Up6", "toolu_01AbCdEfGhIjKlMnOpQrStUv"),
        completion_usage=TokenUsage(input=86, cached_input=1920, cache_write=64, output=12),
    ),
    "azure_openai": Expect(
        text_usage=TokenUsage(input=86, cached_input=1920, output=12),
        tool_call_ids=("call_DdmO9pD3xa9XTPNJ32zg2hcA", "call_ABmO9pD3xa9XTPNJ32zg2hcB"),
        completion_usage=TokenUsage(input=86, cached_input=1920, output=100, reasoning=200),
    ),
    "bedrock_converse": Expect(
        text_usage=TokenUsage(input=86, cached_input=1920, cache_write=64, output=12),
        tool_call_ids=("tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", "tooluse_Wq3RqX2rSCWbm0gZ4V7y1A"),
        completion_usage=TokenUsage(input=86, cached_input=1920, cache_write=64, output=12),
    ),
    "gemini": Expect(
        text_usage=TokenUsage(input=86, cached_input=1920, output=12),
        tool_call_ids=("call_DdmO9pD3xa9XTPNJ32zg2hcA", "call_ABmO9pD3xa9XTPNJ32zg2hcB"),
        completion_usage=TokenUsage(input=86, cached_input=1920, output=100, reasoning=200),
    ),
}
NAMES = list(EXPECT)
ANSWERS = {"openai": "openai_completion.json", "anthropic": "anthropic_message.json",
           "azure_openai": "azure_openai_completion.json", "bedrock_converse": "bedrock_converse_message.json",
           "gemini": "gemini_message.json"}


def error_fixture(name: str, suffix: str) -> tuple[bytes, dict[str, str]]:
    """(body, headers) of a recorded error answer (Bedrock's name the exception in ``x-amzn-ErrorType``)."""
    if name == "openai" and suffix == "overloaded":
        return b"<html>503</html>", {}
    if name == "anthropic" and suffix == "context":
        suffix = "prompt_too_long"
    raw = wire(f"{name}_error_{suffix}.json")
    if name != "bedrock_converse":
        return raw, {}
    recorded = orjson.loads(raw)
    return orjson.dumps(recorded["body"]), {"x-amzn-ErrorType": recorded["x-amzn-ErrorType"]}
STAMPED = {"id", "object", "created", "model", "usage"}


def test_registry_holds_stateless_singletons():
    assert set(DIALECTS) == set(NAMES)
    for name in DIALECTS:
        assert get_dialect(name) is get_dialect(name)
        assert get_dialect(name).name == name
    with pytest.raises(KeyError, match="cohere"):
        get_dialect("cohere")


@pytest.mark.parametrize("name", NAMES)
class TestDialectContract:
    def test_text_stream_content_concatenates_to_the_full_text(self, name):
        chunks, tr = translate(name, stream(name, "text"))
        out = assemble(chunks)
        assert out["role"] == "assistant"
        assert out["content"] == TEXT
        assert out["finish_reason"] == tr.finish_reason == "stop"
        assert tr.done
        assert tr.text_so_far() == TEXT
        assert out["tool_calls"] == []

    def test_chunks_are_openai_shaped_and_unstamped(self, name):
        chunks, _ = translate(name, stream(name, "tools"))
        for chunk in chunks:
            assert not STAMPED & set(chunk)
            (choice,) = chunk["choices"]
            assert choice["index"] == 0 and isinstance(choice["delta"], dict)
            assert "finish_reason" in choice
        assert [c["choices"][0]["finish_reason"] for c in chunks].count("tool_calls") == 1
        assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"

    def test_usage_is_recorded_not_emitted(self, name):
        chunks, tr = translate(name, stream(name, "text"))
        assert tr.usage == EXPECT[name].text_usage
        assert all("usage" not in c for c in chunks)

    def test_tool_stream_reassembles_calls_in_order(self, name):
        chunks, tr = translate(name, stream(name, "tools"))
        out = assemble(chunks)
        assert out["finish_reason"] == tr.finish_reason == "tool_calls"
        assert [c["id"] for c in out["tool_calls"]] == list(EXPECT[name].tool_call_ids)
        assert [(c["name"], orjson.loads(c["arguments"])) for c in out["tool_calls"]] == CALLS
        assert '"location"' in tr.text_so_far() and "Paris, France" in tr.text_so_far()

    def test_first_tool_delta_carries_id_type_name_and_empty_arguments(self, name):
        chunks, _ = translate(name, stream(name, "tools"))
        firsts = [
            call for c in chunks for call in c["choices"][0]["delta"].get("tool_calls") or () if "id" in call
        ]
        assert [(f["index"], f["type"], f["function"]["arguments"]) for f in firsts] == [
            (0, "function", ""), (1, "function", ""),
        ]  # fmt: skip

    def test_length_stop_maps_to_length(self, name):
        chunks, tr = translate(name, stream(name, "length"))
        assert assemble(chunks) | {"role": None} == {
            "role": None, "content": "Once upon a time", "tool_calls": [], "finish_reason": "length",
        }  # fmt: skip
        assert tr.finish_reason == "length" and tr.done

    def test_chunks_are_emitted_as_events_arrive(self, name):
        tr = get_dialect(name).stream_translator()
        seen: list[str] = []
        for event in events(stream(name, "text"), dialect=name):
            for chunk in tr.feed(event):
                seen.append(chunk["choices"][0]["delta"].get("content") or "")
            if "".join(seen).endswith("Hello"):
                assert not tr.done and tr.finish_reason is None
        assert "".join(seen) == TEXT

    def test_in_stream_error_is_classified_after_partial_output(self, name):
        tr = get_dialect(name).stream_translator()
        got: list[dict] = []
        with pytest.raises(UpstreamUnavailable) as info:
            for event in events(stream(name, "error"), dialect=name):
                got += tr.feed(event)
        assert assemble(got)["content"] == "Partial"
        assert info.value.retryable and info.value.upstream_status >= 500
        assert not tr.done

    def test_non_stream_completion(self, name):
        result = get_dialect(name).parse_chat(body(ANSWERS[name]))
        assert not {"id", "object", "created", "model"} & set(result.body)
        msg = result.body["choices"][0]["message"]
        assert msg["role"] == "assistant" and msg["content"] == "Hello! How can I help you today?"
        assert result.finish_reason == result.body["choices"][0]["finish_reason"] == "stop"
        assert result.usage == EXPECT[name].completion_usage

    def test_completion_without_usage_is_marked_unreported(self, name):
        data = body(ANSWERS[name])
        del data["usageMetadata" if name == "gemini" else "usage"]
        assert get_dialect(name).parse_chat(data).usage == UNREPORTED

    @pytest.mark.parametrize(
        ("status", "suffix", "cls", "code"),
        [
            (400, "context", UpstreamRejected, "context_length_exceeded"),
            (400, "policy", UpstreamRejected, "content_policy_violation"),
            (400, "400", UpstreamRejected, "provider_rejected"),
            (429, "429", UpstreamRateLimited, "provider_capacity"),
            (401, "401", UpstreamAuth, "provider_auth_failed"),
            (503, "overloaded", UpstreamUnavailable, "provider_unavailable"),
        ],
    )
    def test_error_bodies_are_classified(self, name, status, suffix, cls, code):
        raw, headers = error_fixture(name, suffix)
        err = get_dialect(name).parse_error(status, raw, {"retry-after": "7", **headers})
        assert type(err) is cls and err.code == code
        assert err.upstream_status == status
        assert f"HTTP {status}" in err.message
        assert "sk-" not in err.message
        if cls is UpstreamRateLimited:
            assert err.retry_after == 7.0
        if code == "context_length_exceeded":
            assert "128000" in err.message or "200000" in err.message

    def test_auth_errors_never_echo_the_provider_message(self, name):
        raw, headers = error_fixture(name, "401")
        err = get_dialect(name).parse_error(401, raw, headers)
        for leak in ("Incorrect API key", "invalid x-api-key", "sk-", "ab12", "wxyz", "not valid", "invalid subscription",
                     "security token"):
            assert leak not in err.message

    @pytest.mark.parametrize("status", [500, 502, 504, 529])
    def test_server_errors_are_retryable_unavailable(self, name, status):
        err = get_dialect(name).parse_error(status, b"", {})
        assert isinstance(err, UpstreamUnavailable) and err.retryable and err.upstream_status == status

    def test_retry_after_ms_wins_and_header_case_is_ignored(self, name):
        err = get_dialect(name).parse_error(429, b"{}", {"Retry-After-Ms": "1500", "Retry-After": "2"})
        assert isinstance(err, UpstreamRateLimited) and err.retry_after == 1.5

    def test_request_never_shows_the_secret_in_repr(self, name):
        if name == "bedrock_converse":  # signed, never sent: the signature names the key id only
            credential = AwsSigner(static_credentials("AKIDEXAMPLE:sk-secret-value-123"), "eu-west-1")
        else:
            credential = "sk-secret-value-123"
        req = get_dialect(name).chat_request(
            {"model": "chat-default", "messages": [{"role": "user", "content": "hi"}]},
            deployment(name), credential, max_output_tokens=64,
        )
        assert isinstance(req, UpstreamRequest) and req.method == "POST"
        assert "sk-secret" not in repr(req)
        if name == "bedrock_converse":
            assert "sk-secret" not in repr(credential)
        if name == "bedrock_converse":
            assert req.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
            assert not any("sk-secret" in v for v in req.headers.values())
        else:
            assert any("sk-secret-value-123" in v for v in req.headers.values())

    def test_unknown_top_level_parameter_is_named(self, name):
        from proxy.errors import UnsupportedParameter

        with pytest.raises(UnsupportedParameter) as info:
            get_dialect(name).validate(
                {"model": "m", "messages": [{"role": "user", "content": "x"}], "top_k": 3}, deployment(name)
            )
        assert info.value.param == "top_k" and "top_k" in info.value.message

    @pytest.mark.parametrize(
        ("caps", "extra", "param"),
        [
            ({"streaming"}, {"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
            ({"tools"}, {"stream": True}, "stream"),
            (set(), {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}}, "response_format"),
            (set(), {"response_format": {"type": "json_object"}}, "response_format"),
        ],
    )
    def test_missing_capability_is_named(self, name, caps, extra, param):
        from proxy.errors import UnsupportedParameter

        with pytest.raises(UnsupportedParameter) as info:
            get_dialect(name).validate(
                {"model": "m", "messages": [{"role": "user", "content": "x"}], **extra}, deployment(name, caps)
            )
        assert info.value.param == param

    def test_image_without_vision_is_named(self, name):
        from proxy.errors import UnsupportedParameter

        msg = {"role": "user", "content": [
            {"type": "text", "text": "what is this"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        ]}  # fmt: skip
        with pytest.raises(UnsupportedParameter) as info:
            get_dialect(name).validate({"model": "m", "messages": [msg]}, deployment(name, {"streaming"}))
        assert info.value.param == "messages[0].content[1]"
        get_dialect(name).validate({"model": "m", "messages": [msg]}, deployment(name))


def test_errors_are_upstream_errors():
    for name in DIALECTS:
        assert isinstance(get_dialect(name).parse_error(418, b"", {}), UpstreamError)
