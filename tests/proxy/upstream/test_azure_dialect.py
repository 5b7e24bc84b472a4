"""Azure OpenAI: the two URL forms, api-key vs Entra auth, content filters, Azure's annotations dropped."""

from __future__ import annotations

import orjson
import pytest
from upstream_wire import assemble, body, deployment, stream, translate, wire

from proxy.errors import UpstreamRejected
from proxy.upstream.dialects import get_dialect

D = get_dialect("azure_openai")
CHAT = {"model": "chat-default", "messages": [{"role": "user", "content": "hi"}]}


def test_deployment_name_url_and_api_key_header():
    dep = deployment("azure_openai", model="gpt-4o prod")
    req = D.chat_request(CHAT, dep, "azure-key-1", max_output_tokens=50)
    assert req.url == ("https://res-1.openai.azure.test/openai/deployments/gpt-4o%20prod/chat/completions"
                       "?api-version=2024-10-21")
    assert req.headers["api-key"] == "azure-key-1" and "authorization" not in req.headers
    assert orjson.loads(req.body)["max_completion_tokens"] == 50


def test_v1_url_and_entra_bearer():
    dep = deployment("azure_openai", base_url="https://res-1.openai.azure.test/openai/v1", api_version=None,
                     auth="entra")
    req = D.chat_request({**CHAT, "stream": True}, dep, "eyJ0eXAi-entra-token", max_output_tokens=50)
    assert req.url == "https://res-1.openai.azure.test/openai/v1/chat/completions"
    assert req.headers["authorization"] == "Bearer eyJ0eXAi-entra-token" and "api-key" not in req.headers
    sent = orjson.loads(req.body)
    assert sent["model"] == "pinned-model-1" and sent["stream_options"] == {"include_usage": True}


def test_embeddings_use_the_same_url_form():
    req = D.embeddings_request({"input": "x"}, deployment("azure_openai"), "k")
    assert req.url.endswith("/openai/deployments/pinned-model-1/embeddings?api-version=2024-10-21")


def test_a_filtered_prompt_names_its_categories_and_is_not_retried():
    err = D.parse_error(400, wire("azure_openai_error_policy.json"), {})
    assert type(err) is UpstreamRejected and err.code == "content_policy_violation" and not err.retryable
    assert "violence (medium)" in err.message and "Upstream (azure_openai)" in err.message


def test_annotations_are_dropped_from_answers_and_chunks():
    result = D.parse_chat(body("azure_openai_completion.json"))
    assert "prompt_filter_results" not in result.body
    assert "content_filter_results" not in result.body["choices"][0]
    chunks, tr = translate("azure_openai", stream("azure_openai", "text"))
    assert not any("prompt_filter_results" in c or "content_filter_results" in c["choices"][0] for c in chunks)
    assert assemble(chunks)["content"].startswith("Hello! How can")


def test_an_output_filter_ends_with_content_filter():
    data = body("azure_openai_completion.json")
    data["choices"][0]["finish_reason"] = "content_filter"
    assert D.parse_chat(data).finish_reason == "content_filter"


@pytest.mark.parametrize("status", [429, 503])
def test_capacity_and_outages_are_retryable(status):
    assert D.parse_error(status, b'{"error": {"code": "429", "message": "x"}}', {"retry-after": "3"}).retryable
