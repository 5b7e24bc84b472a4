"""Events record the client surface, and finance groups by it: one request on each surface, then the usage API
(the same views as ``farebox report showback``) by ``api``."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from tests.harness import Stack, admin_token, read_events

pytestmark = pytest.mark.e2e


def test_every_surface_is_recorded_and_grouped(stack: Stack, client: openai.OpenAI) -> None:
    chat = client.chat.completions.with_raw_response.create(
        model="chat-openai", messages=[{"role": "user", "content": "hi"}], max_completion_tokens=16)
    responses = client.responses.with_raw_response.create(model="chat-openai", input="hi", max_output_tokens=16)
    with anthropic.Anthropic(base_url=stack.gateway_url, api_key=stack.key, max_retries=0) as claude:
        messages = claude.messages.with_raw_response.create(model="chat-anthropic", max_tokens=16,
                                                            messages=[{"role": "user", "content": "hi"}])
    embeddings = client.embeddings.with_raw_response.create(model="embed-default", input="hi")
    ids = {name: raw.headers["x-fb-request-id"] for name, raw in
           (("chat", chat), ("responses", responses), ("messages", messages), ("embeddings", embeddings))}
    admitted = {e.request_id: e.api for e in read_events(stack.events_path) if e.type == "request.admitted"}
    assert {name: admitted[rid] for name, rid in ids.items()} == {name: name for name in ids}
    token = admin_token(stack.config, "fin-surfaces", "finance", live_at=stack.gateway_url)
    usage = httpx.get(stack.gateway_url + "/admin/v1/usage", params={"by": "api"}, timeout=60,
                      headers={"Authorization": f"Bearer {token}"})
    assert usage.status_code == 200, usage.text
    rows = {row["api"]: row for row in usage.json()["data"]}
    assert {"chat", "responses", "messages", "embeddings"} <= set(rows)
    assert all(rows[name]["requests"] >= 1 and int(rows[name]["spend_micro"]) > 0 for name in ("responses", "messages"))
