"""Gemini (API key) and Vertex AI (OAuth): request translation, URLs, blocks, errors, thoughts."""

from __future__ import annotations

import orjson
import pytest
from upstream_wire import body, deployment, stream, translate

from proxy.errors import InvalidRequest, UnsupportedParameter, UpstreamAuth, UpstreamRateLimited, UpstreamRejected
from proxy.upstream.dialects import get_dialect

D = get_dialect("gemini")
VERTEX = "https://europe-west4-aiplatform.googleapis.com/v1/projects/acme-ml/locations/europe-west4/publishers/google"


def test_request_translation():
    chat = {"model": "m", "temperature": 0.4, "seed": 7, "stop": ["END"],
            "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {
                "type": "object", "properties": {"n": {"type": "integer"}}}}},
            "messages": [
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": "Weather in Pune?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Pune"}'}}]},
                {"role": "tool", "tool_call_id": "c1", "content": '{"temp_c": 31}'},
                {"role": "tool", "tool_call_id": "c1", "content": "plain text"}]}
    D.validate(chat, deployment("gemini"))
    req = D.chat_request(chat, deployment("gemini"), "AIza-key", max_output_tokens=64)
    assert req.url == "https://generativelanguage.googleapis.test/v1beta/models/pinned-model-1:generateContent"
    assert req.headers["x-goog-api-key"] == "AIza-key"
    assert orjson.loads(req.body) == {
        "contents": [
            {"role": "user", "parts": [{"text": "Weather in Pune?"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Pune"}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"temp_c": 31}}},
                                       {"functionResponse": {"name": "get_weather",
                                                             "response": {"content": "plain text"}}}]},
        ],
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "generationConfig": {"maxOutputTokens": 64, "temperature": 0.4, "seed": 7, "stopSequences": ["END"],
                             "responseMimeType": "application/json",
                             "responseJsonSchema": {"type": "object", "properties": {"n": {"type": "integer"}}}},
    }


def test_vertex_url_and_bearer_token():
    dep = deployment("gemini", base_url=VERTEX, auth="google_oauth", model="gemini-2.5-flash")
    req = D.chat_request({"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]}, dep,
                         "ya29.token", max_output_tokens=5)
    assert req.url == VERTEX + "/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    assert req.headers["authorization"] == "Bearer ya29.token" and "x-goog-api-key" not in req.headers


def test_tool_choice_and_declarations():
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    req = D.chat_request({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": tools,
                          "tool_choice": {"type": "function", "function": {"name": "f"}}}, deployment("gemini"), None,
                         max_output_tokens=5)
    sent = orjson.loads(req.body)
    assert sent["tools"] == [{"functionDeclarations": [{"name": "f", "parametersJsonSchema": {"type": "object"}}]}]
    assert sent["toolConfig"] == {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["f"]}}


def test_a_tool_result_must_answer_a_known_call():
    with pytest.raises(InvalidRequest):
        D.validate({"model": "m", "messages": [{"role": "tool", "tool_call_id": "nope", "content": "x"}]},
                   deployment("gemini"))


def test_thoughts_are_not_relayed_but_billed():
    result = D.parse_chat(body("gemini_message.json"))
    assert result.body["choices"][0]["message"]["content"] == "Hello! How can I help you today?"
    assert result.usage.reasoning == 200


def test_a_blocked_prompt_is_a_content_policy_rejection():
    with pytest.raises(UpstreamRejected) as info:
        D.parse_chat({"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 9}})
    assert info.value.code == "content_policy_violation"


def test_a_safety_stop_is_content_filter():
    data = body("gemini_message.json")
    data["candidates"][0]["finishReason"] = "PROHIBITED_CONTENT"
    assert D.parse_chat(data).finish_reason == "content_filter"


def test_bad_key_is_auth_and_resource_exhausted_retries_after_its_delay():
    bad_key = {"error": {"code": 400, "message": "API key not valid.", "status": "INVALID_ARGUMENT", "details": [
        {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}]}}
    assert isinstance(D.parse_error(400, orjson.dumps(bad_key), {}), UpstreamAuth)
    exhausted = {"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED", "details": [
        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "17s"}]}}
    err = D.parse_error(429, orjson.dumps(exhausted), {})
    assert isinstance(err, UpstreamRateLimited) and err.retry_after == 17.0


def test_a_stream_cut_before_its_finish_is_not_done():
    raw = stream("gemini", "text")
    _, tr = translate("gemini", raw[: raw.rindex(b"data:")])
    assert not tr.done and tr.finish_reason is None


@pytest.mark.parametrize(("asked", "header"), [(None, None), ("auto", None), ("flex", "flex"), ("priority", "priority")])
def test_vertex_is_asked_for_a_tier_by_header(asked, header):
    dep = deployment("gemini", base_url=VERTEX, auth="google_oauth")
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], **({"service_tier": asked} if asked else {})}
    D.validate(body, dep)
    req = D.chat_request(body, dep, "ya29.token", max_output_tokens=5)
    assert req.headers.get("x-vertex-ai-llm-shared-request-type") == header
    assert "service_tier" not in orjson.loads(req.body) and "serviceTier" not in orjson.loads(req.body)


@pytest.mark.parametrize(("dep", "asked"), [(deployment("gemini"), "flex"),
                                            (deployment("gemini", base_url=VERTEX, auth="google_oauth"), "scale")])
def test_a_tier_the_deployment_cannot_be_asked_for_is_refused(dep, asked):
    with pytest.raises(UnsupportedParameter) as info:
        D.validate({"model": "m", "messages": [{"role": "user", "content": "x"}], "service_tier": asked}, dep)
    assert info.value.param == "service_tier"


@pytest.mark.parametrize(("traffic", "tier"), [("ON_DEMAND", None), ("ON_DEMAND_PRIORITY", "priority"),
                                               ("ON_DEMAND_FLEX", "flex"), ("PROVISIONED_THROUGHPUT", "provisioned"),
                                               (None, None), (7, None)])
def test_traffic_type_names_the_tier_that_served(traffic, tier):
    data = body("gemini_message.json")
    if traffic is not None:
        data["usageMetadata"]["trafficType"] = traffic
    assert D.parse_chat(data).usage.service_tier == tier
    chunks, tr = translate("gemini", b"data: " + orjson.dumps(data) + b"\r\n\r\n")
    assert tr.usage.service_tier == tier
