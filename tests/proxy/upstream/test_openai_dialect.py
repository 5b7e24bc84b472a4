"""OpenAI chat dialect: request stamping, pass-through details, embeddings, stream edge cases."""

from __future__ import annotations

import orjson
import pytest
from upstream_wire import body, deployment, translate, wire

from ledger.usage import TokenUsage
from proxy.errors import UnsupportedParameter, UpstreamRateLimited, UpstreamRejected, UpstreamUnavailable
from proxy.upstream.base import SSEEvent
from proxy.upstream.dialects import get_dialect
from proxy.upstream.openai_chat import KNOWN_PARAMS

D = get_dialect("openai")
DEP = deployment("openai")
MSGS = [{"role": "user", "content": "hi"}]


def _sent(caller: dict, **kw) -> tuple[dict, dict, str]:
    req = D.chat_request(caller, DEP, kw.pop("secret", "sk-test"), max_output_tokens=256, **kw)
    return orjson.loads(req.body), dict(req.headers), req.url


def test_request_stamps_model_cap_and_auth():
    sent, headers, url = _sent({"model": "chat-default", "messages": MSGS, "max_tokens": 9999, "temperature": 0.2})
    assert url == "https://api.openai.test/v1/chat/completions"
    assert sent == {"model": "pinned-model-1", "messages": MSGS, "temperature": 0.2, "max_completion_tokens": 256}
    assert headers["authorization"] == "Bearer sk-test"
    assert headers["content-type"] == "application/json"


def test_no_secret_no_auth_header_and_extras_cannot_override_auth():
    _, headers, _ = _sent({"model": "m", "messages": MSGS}, secret=None, extra_headers={"x-sim-ttft": "5"})
    assert "authorization" not in headers and headers["x-sim-ttft"] == "5"
    _, headers, _ = _sent({"model": "m", "messages": MSGS}, extra_headers={"authorization": "Bearer evil"})
    assert headers["authorization"] == "Bearer sk-test"


@pytest.mark.parametrize("options", [None, {"include_usage": False}, {"include_usage": True}])
def test_streams_always_ask_for_usage(options):
    caller = {"model": "m", "messages": MSGS, "stream": True}
    if options is not None:
        caller["stream_options"] = options
    sent, headers, _ = _sent(caller)
    assert sent["stream_options"] == {"include_usage": True}
    assert headers["accept"] == "text/event-stream"
    assert caller.get("stream_options") == options  # the caller's body is not mutated


def test_stream_options_dropped_without_stream():
    sent, _, _ = _sent({"model": "m", "messages": MSGS, "stream_options": {"include_usage": True}})
    assert "stream_options" not in sent


def test_all_spec_parameters_validate_with_full_capabilities():
    caller = {p: None for p in KNOWN_PARAMS} | {"model": "m", "messages": MSGS}
    D.validate(caller, DEP)
    assert {"messages", "tools", "max_completion_tokens", "reasoning_effort", "stream_options"} <= KNOWN_PARAMS


def test_json_object_accepted_with_json_schema_capability():
    D.validate({"model": "m", "messages": MSGS, "response_format": {"type": "json_object"}}, deployment("openai", {"json_schema"}))
    with pytest.raises(UnsupportedParameter):
        D.validate({"model": "m", "messages": MSGS, "response_format": {"type": "grammar"}}, DEP)


def test_parse_chat_keeps_everything_but_stamped_keys():
    result = D.parse_chat(body("openai_completion.json"))
    assert set(result.body) == {"choices", "usage", "service_tier", "system_fingerprint"}
    assert result.body["choices"][0]["message"]["annotations"] == []


def test_embeddings_request_and_parse():
    req = D.embeddings_request({"model": "embed-default", "input": ["a", "b"]}, DEP, "sk-e")
    assert req.url == "https://api.openai.test/v1/embeddings"
    assert orjson.loads(req.body) == {"model": "pinned-model-1", "input": ["a", "b"]}
    result = D.parse_embeddings(body("openai_embeddings.json"))
    assert "model" not in result.body and result.body["object"] == "list"
    assert result.usage == TokenUsage(input=8)


def test_usage_on_a_chunk_with_choices_is_recorded_and_stripped():
    tr = D.stream_translator()
    chunk = {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}],
             "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}  # fmt: skip
    (out,) = tr.feed(SSEEvent(None, orjson.dumps(chunk).decode()))
    assert out == {"choices": chunk["choices"]}
    assert tr.usage == TokenUsage(input=5, output=1) and tr.finish_reason == "stop"


def test_done_and_blank_events():
    tr = D.stream_translator()
    assert tr.feed(SSEEvent(None, "")) == []
    assert tr.feed(SSEEvent(None, "[DONE]")) == [] and tr.done


@pytest.mark.parametrize(
    ("payload", "cls", "code"),
    [
        ({"error": {"message": "Rate limit", "type": "requests", "code": "rate_limit_exceeded"}}, UpstreamRateLimited, "provider_capacity"),
        ({"error": {"message": "This model's maximum context length is 4096 tokens.", "type": "BadRequestError", "code": 400}}, UpstreamRejected, "context_length_exceeded"),
        ({"object": "error", "message": "boom", "type": "InternalServerError", "code": 500}, UpstreamUnavailable, "provider_unavailable"),
    ],
)
def test_in_stream_error_shapes(payload, cls, code):
    with pytest.raises(cls) as info:
        D.stream_translator().feed(SSEEvent(None, orjson.dumps(payload).decode()))
    assert info.value.code == code


def test_non_json_stream_event_is_unavailable():
    with pytest.raises(UpstreamUnavailable):
        D.stream_translator().feed(SSEEvent(None, "{not json"))


def test_azure_content_filter_is_policy():
    raw = orjson.dumps({"error": {"code": "content_filter", "message": "The response was filtered", "innererror": {"code": "ResponsibleAIPolicyViolation"}}})
    err = D.parse_error(400, raw, {})
    assert err.code == "content_policy_violation"


def test_text_so_far_includes_tool_arguments():
    _, tr = translate("openai", wire("openai_tools.sse"))
    assert tr.text_so_far() == '{"location": "Paris, France"}{"tz": "Europe/Paris"}'


def test_bare_string_error_body():
    err = D.parse_error(400, b'{"error": "maximum context length is 4096 tokens"}', {})
    assert isinstance(err, UpstreamRejected) and err.code == "context_length_exceeded"
