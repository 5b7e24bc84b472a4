"""Bedrock Converse: request translation, URLs, SigV4 (AWS's published vectors, and the simulator's verifier),
the event-stream framing and error classes."""

from __future__ import annotations

import datetime as dt

import botocore.auth
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from upstream_wire import deployment, events, stream

from infra.simulator.aws_auth import SignatureError, event, exception, verify
from proxy.errors import UnsupportedParameter, UpstreamAuth, UpstreamRateLimited, UpstreamUnavailable
from proxy.upstream.bedrock.eventstream import EventStreamParser
from proxy.upstream.credentials.aws import AwsSigner, aws_host, static_credentials
from proxy.upstream.dialects import get_dialect

D = get_dialect("bedrock_converse")
SIGNER = AwsSigner(static_credentials("AKIDEXAMPLE:wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"), "eu-west-1")
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather now",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


def _body(req) -> dict:
    return orjson.loads(req.body)


def test_request_translation_moves_every_part_where_converse_wants_it():
    body = {"model": "chat-default", "temperature": 0.2, "top_p": 0.9, "stop": "END", "tools": TOOLS,
            "tool_choice": "required", "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "Weather in Pune?"},
                                             {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "t1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Pune"}'}}]},
                {"role": "tool", "tool_call_id": "t1", "content": "31 C"},
                {"role": "user", "content": "And tomorrow?"}]}
    D.validate(body, deployment("bedrock_converse"))
    req = D.chat_request(body, deployment("bedrock_converse"), SIGNER, max_output_tokens=300)
    assert req.url == "https://bedrock-runtime.eu-west-1.amazonaws.com/model/pinned-model-1/converse"
    assert _body(req) == {
        "messages": [
            {"role": "user", "content": [{"text": "Weather in Pune?"},
                                         {"image": {"format": "png", "source": {"bytes": "AAAA"}}}]},
            {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t1", "name": "get_weather",
                                                           "input": {"city": "Pune"}}}]},
            {"role": "user", "content": [{"toolResult": {"toolUseId": "t1", "content": [{"text": "31 C"}]}},
                                         {"text": "And tomorrow?"}]},
        ],
        "system": [{"text": "Be brief."}],
        "inferenceConfig": {"maxTokens": 300, "temperature": 0.2, "topP": 0.9, "stopSequences": ["END"]},
        "toolConfig": {"tools": [{"toolSpec": {"name": "get_weather", "inputSchema": {"json": TOOLS[0]["function"]["parameters"]},
                                               "description": "Weather now"}}], "toolChoice": {"any": {}}},
    }


def test_stream_url_model_ids_and_json_mode():
    arn = "arn:aws:bedrock:eu-west-1:123456789012:inference-profile/eu.anthropic.claude-sonnet-4-5-v1:0"
    dep = deployment("bedrock_converse", model=arn)
    req = D.chat_request({"model": "m", "stream": True, "messages": [{"role": "user", "content": "json"}],
                          "response_format": {"type": "json_object"}}, dep, SIGNER, max_output_tokens=10)
    assert req.url.endswith("/model/arn%3Aaws%3Abedrock%3Aeu-west-1%3A123456789012%3Ainference-profile%2F"
                            "eu.anthropic.claude-sonnet-4-5-v1%3A0/converse-stream")
    assert req.headers["accept"] == "application/vnd.amazon.eventstream"
    assert _body(req)["toolConfig"]["toolChoice"] == {"tool": {"name": "json_response"}}


@pytest.mark.parametrize(("extra", "param"), [
    ({"n": 2}, "n"), ({"seed": 1}, "seed"), ({"parallel_tool_calls": False}, "parallel_tool_calls"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}]}]},
     "messages[0].content[0].image_url.url"),
])
def test_what_converse_cannot_carry_is_named(extra, param):
    with pytest.raises(UnsupportedParameter) as info:
        D.validate({"model": "m", "messages": [{"role": "user", "content": "x"}], **extra}, deployment("bedrock_converse"))
    assert info.value.param == param


def test_sigv4_matches_aws_published_vectors(monkeypatch):
    """AWS's Signature Version 4 test suite, get-vanilla and post-vanilla, through our signer."""
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: dt.datetime(2015, 8, 30, 12, 36, 0))
    signer = AwsSigner(static_credentials("AKIDEXAMPLE:wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"), "us-east-1",
                       service="service")
    expected = {"GET": "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
                "POST": "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"}
    for method, signature in expected.items():
        out = signer.sign(method, "https://example.amazonaws.com/", {}, b"")
        assert out["authorization"] == ("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/"
                                        f"aws4_request, SignedHeaders=host;x-amz-date, Signature={signature}")
        assert out["x-amz-date"] == "20150830T123600Z"


def test_the_simulators_verifier_accepts_our_signature_and_nothing_else():
    url = "http://127.0.0.1:9090/model/sim.nova-mid-v1%3A0/converse"
    headers = {"content-type": "application/json", "accept": "application/json", "x-sim-fault": "none"}
    body = b'{"messages": []}'
    signed = {**headers, **SIGNER.sign("POST", url, headers, body), "host": "127.0.0.1:9090"}
    secrets = {"AKIDEXAMPLE": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"}
    assert verify("POST", url, signed, body, secrets.get) == "AKIDEXAMPLE"
    for bad_url, bad_body, bad_headers in ((url, b'{"messages": [1]}', signed),
                                           (url.replace("converse", "converse-stream"), body, signed),
                                           (url, body, {**signed, "content-type": "text/plain"})):
        with pytest.raises(SignatureError):
            verify("POST", bad_url, bad_headers, bad_body, secrets.get)
    with pytest.raises(SignatureError):
        verify("POST", url, signed, body, secrets.get, now=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=6))
    assert "wJalr" not in repr(SIGNER)


def test_chain_credentials_sign_only_for_aws_hosts():
    assert aws_host("https://bedrock-runtime.eu-west-1.amazonaws.com")
    assert aws_host("https://bedrock-runtime.cn-north-1.amazonaws.com.cn")
    assert not aws_host("https://bedrock-runtime.eu-west-1.amazonaws.com.evil.test")
    assert not aws_host("http://127.0.0.1:9090")
    with pytest.raises(ValueError):
        static_credentials("only-a-key-id")


def test_a_request_without_aws_credentials_is_not_sent():
    with pytest.raises(UpstreamAuth):
        D.chat_request({"model": "m", "messages": [{"role": "user", "content": "x"}]}, deployment("bedrock_converse"),
                       "a-plain-key", max_output_tokens=5)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_event_stream_split_anywhere_gives_the_same_events(data):
    raw = stream("bedrock_converse", "tools")
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=40))
    assert events(raw, cuts, "bedrock_converse") == events(raw, (), "bedrock_converse")


def test_a_corrupt_frame_is_the_providers_broken_stream():
    frame = bytearray(event("contentBlockDelta", b'{"contentBlockIndex":0,"delta":{"text":"hi"}}'))
    frame[-6] ^= 0xFF  # payload byte: the message CRC no longer matches
    with pytest.raises(UpstreamUnavailable):
        EventStreamParser().feed(bytes(frame))


@pytest.mark.parametrize(("status", "kind", "cls", "retry"), [
    (429, "ThrottlingException", UpstreamRateLimited, True),
    (400, "ServiceQuotaExceededException", UpstreamRateLimited, True),
    (429, "ModelNotReadyException", UpstreamRateLimited, True),
    (503, "ServiceUnavailableException", UpstreamUnavailable, True),
    (424, "ModelErrorException", UpstreamUnavailable, True),
    (403, "AccessDeniedException", UpstreamAuth, False),
])
def test_exceptions_map_to_retry_classes(status, kind, cls, retry):
    err = D.parse_error(status, b'{"message": "x"}', {"x-amzn-ErrorType": f"{kind}:http://internal.amazon.com/coral/"})
    assert type(err) is cls and err.retryable is retry and kind in err.message


def test_in_stream_throttling_is_a_rate_limit():
    tr = D.stream_translator()
    raw = event("messageStart", b'{"role":"assistant"}') + exception("throttlingException", b'{"message":"slow down"}')
    with pytest.raises(UpstreamRateLimited):
        for ev in events(raw, (), "bedrock_converse"):
            tr.feed(ev)


@pytest.mark.parametrize(("asked", "sent"), [(None, None), ("auto", None), ("default", None), ("flex", "flex"),
                                             ("priority", "priority")])
def test_a_tier_asked_is_bedrocks_service_tier(asked, sent):
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], **({"service_tier": asked} if asked else {})}
    D.validate(body, deployment("bedrock_converse"))
    req = D.chat_request(body, deployment("bedrock_converse"), SIGNER, max_output_tokens=5)
    assert _body(req).get("serviceTier") == ({"type": sent} if sent else None)


def test_a_tier_bedrock_has_not_is_refused_by_name():
    with pytest.raises(UnsupportedParameter) as info:
        D.validate({"model": "m", "messages": [{"role": "user", "content": "x"}], "service_tier": "scale"},
                   deployment("bedrock_converse"))
    assert info.value.param == "service_tier" and "priority, flex or default" in info.value.message


def test_the_tier_that_served_is_read_from_the_answer_and_the_stream():
    answer = {"output": {"message": {"role": "assistant", "content": [{"text": "hi"}]}}, "stopReason": "end_turn",
              "usage": {"inputTokens": 3, "outputTokens": 1, "totalTokens": 4}, "serviceTier": {"type": "flex"}}
    assert D.parse_chat(answer).usage.service_tier == "flex"
    assert D.parse_chat({**answer, "serviceTier": {"type": "default"}}).usage.service_tier is None
    tr = D.stream_translator()
    raw = (event("messageStart", b'{"role":"assistant"}') + event("messageStop", b'{"stopReason":"end_turn"}')
           + event("metadata", b'{"usage":{"inputTokens":3,"outputTokens":1},"serviceTier":{"type":"priority"}}'))
    for ev in events(raw, (), "bedrock_converse"):
        tr.feed(ev)
    assert tr.done and tr.usage.service_tier == "priority" and tr.usage.output == 1
