"""``proxy.upstream.passthrough``: a Messages body passed to Anthropic as written, with the privacy policy's
placeholders in every text the provider reads but the model's own signed thinking, and values back out."""

from __future__ import annotations

import orjson

from proxy.privacy.redact import Redaction
from proxy.snapshot import Deployment
from proxy.upstream.passthrough import NativeMessages, redacted_body, restored_message


def _redaction() -> Redaction:
    r = Redaction()
    r.placeholder("email", "asha@example.com")
    return r


BODY = {
    "model": "chat-anthropic", "max_tokens": 4000, "top_k": 5, "thinking": {"type": "enabled", "budget_tokens": 1024},
    "system": [{"type": "text", "text": "Write to asha@example.com.", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {"role": "user", "content": "I am asha@example.com"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "asha@example.com asked", "signature": "sig"},
            {"type": "tool_use", "id": "t1", "name": "mail", "input": {"to": ["asha@example.com"]}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": [{"type": "text", "text": "sent to asha@example.com"}]}]},
    ],
}


def test_placeholders_go_everywhere_the_provider_reads_but_signed_thinking() -> None:
    out = redacted_body(BODY, _redaction().redact)
    wire = orjson.dumps(out).decode()
    assert wire.count("asha@example.com") == 1 and out["messages"][1]["content"][0]["thinking"] == "asha@example.com asked"
    assert out["system"][0] == {"type": "text", "text": "Write to <EMAIL_1>.", "cache_control": {"type": "ephemeral"}}
    assert out["messages"][0]["content"] == "I am <EMAIL_1>"
    assert out["messages"][1]["content"][1]["input"] == {"to": ["<EMAIL_1>"]}
    assert out["messages"][2]["content"][0]["content"][0]["text"] == "sent to <EMAIL_1>"
    assert BODY["messages"][0]["content"] == "I am asha@example.com"  # the client's body is left as it was


def test_an_answer_is_restored_but_its_thinking() -> None:
    answer = {"id": "msg_1", "content": [{"type": "thinking", "thinking": "<EMAIL_1>", "signature": "s"},
                                         {"type": "text", "text": "Hi <EMAIL_1>"},
                                         {"type": "tool_use", "id": "t", "name": "m", "input": {"to": "<EMAIL_1>"}}]}
    out = restored_message(answer, _redaction().restore)
    assert out["content"][0]["thinking"] == "<EMAIL_1>" and out["content"][1]["text"] == "Hi asha@example.com"
    assert out["content"][2]["input"] == {"to": "asha@example.com"}


def test_the_request_is_the_clients_with_the_deployments_model_and_the_plans_cap() -> None:
    dep = Deployment.__new__(Deployment)
    for name, value in (("model", "claude-x"), ("base_url", "http://anthropic.test/")):
        object.__setattr__(dep, name, value)
    req = NativeMessages(BODY, "beta-1").chat_request({}, dep, "secret", max_output_tokens=2048,
                                                      extra_headers={"x-sim-a": "1"})
    sent = orjson.loads(req.body)
    assert req.url == "http://anthropic.test/v1/messages" and sent["model"] == "claude-x" and sent["max_tokens"] == 2048
    assert sent["top_k"] == 5 and sent["thinking"] == BODY["thinking"] and sent["messages"] == BODY["messages"]
    assert req.headers["anthropic-beta"] == "beta-1" and req.headers["x-api-key"] == "secret"
    assert req.headers["x-sim-a"] == "1"
