"""A provider that lies cannot break the bill, the ledger or the response.

A real gateway process (embedded mode, SQLite log) in front of ``hostile_upstream``: both dialects, streamed
and not, with negative, huge, float and string usage counts, an error object in a 200 body (and as a stream's
final event), a body or stream cut mid-way, a stream without usage and a 5 MB chunk. For each: the client gets
a clean answer (an OpenAI-shaped error, or a stream ending in ``[DONE]`` or one error event, never a second
status line), exactly one settlement per admission, a positive cost whenever content reached the client,
every event stored (the log reads back whole), and the team's next request is served.
"""

from __future__ import annotations

from typing import Iterator

import httpx
import orjson
import pytest

from tests.e2e.hostile_upstream import BAD_COUNTS, CASES, hostile_upstream
from tests.harness import Stack, read_events, running_stack

pytestmark = pytest.mark.e2e

DIALECTS = ("openai", "anthropic")


def _hostile(url: str):  # noqa: ANN202 - a config mutator
    def mutate(tree: dict) -> None:
        base = next(d for d in tree["deployments"] if d["id"] == "sim-openai-mumbai")
        for dialect, path in (("openai", "/openai/v1"), ("anthropic", "/anthropic")):
            tree["deployments"].append({
                **{k: v for k, v in base.items() if k not in ("forward_headers",)},
                "id": f"hostile-{dialect}", "dialect": dialect, "base_url": url + path,
                "provider": f"hostile-{dialect}", "account": f"acct-hostile-{dialect}", "model": "hostile-model",
                "capabilities": ["streaming"],
            })
            tree["aliases"].append({"name": f"hostile-{dialect}", "kind": "chat", "deployments": [f"hostile-{dialect}"],
                                    "max_attempts": 1, "timeouts": {"connect_s": 5, "first_token_s": 10,
                                                                    "total_s": 30, "idle_s": 5, "heartbeat_s": 15}})
    return mutate


@pytest.fixture(scope="module")
def hostile_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with hostile_upstream() as (url, _counts):
        with running_stack(tmp_path_factory.mktemp("hostile"), aliases="chat-openai,hostile-openai,hostile-anthropic",
                           mutate=_hostile(url)) as stack:
            yield stack


@pytest.fixture(scope="module")
def http(hostile_stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=hostile_stack.gateway_url, timeout=60,
                      headers={"Authorization": f"Bearer {hostile_stack.key}"}) as client:
        yield client


def _stream_events(text: str) -> list[object]:
    """Every ``data:`` payload of an SSE body, JSON-decoded (``[DONE]`` kept as the string)."""
    out: list[object] = []
    for block in text.split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                payload = line[6:]
                out.append(payload if payload == "[DONE]" else orjson.loads(payload))
    return out


def _content_of(events: list[object]) -> str:
    text = []
    for ev in events:
        if isinstance(ev, dict):
            for choice in ev.get("choices") or ():
                text.append((choice.get("delta") or {}).get("content") or "")
    return "".join(text)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_lying_provider_gets_a_clean_reply_one_settlement_and_a_served_team(
    hostile_stack: Stack, http: httpx.Client, dialect: str, stream: bool, case: str,
) -> None:
    body = {"model": f"hostile-{dialect}", "messages": [{"role": "user", "content": case}],
            "max_completion_tokens": 64, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    resp = http.post("/v1/chat/completions", json=body)
    rid = resp.headers["x-fb-request-id"]
    if stream and resp.status_code == 200:
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert "HTTP/1." not in resp.text  # one writer: never a second status line inside the body
        events = _stream_events(resp.text)
        last = events[-1]
        assert last == "[DONE]" or (isinstance(last, dict) and set(last["error"]) == {"type", "code", "message",
                                                                                          "param"}), last
        delivered = bool(_content_of(events))
        if last == "[DONE]":
            usage = events[-2]["usage"]  # type: ignore[index]
            assert usage["prompt_tokens"] >= 0 and usage["completion_tokens"] > 0
    else:
        assert resp.headers["content-type"].startswith("application/json"), resp.text[:300]
        answer = resp.json()
        if resp.status_code == 200:
            assert answer["choices"][0]["message"]["content"]
            assert answer["usage"]["prompt_tokens"] >= 0 and answer["usage"]["completion_tokens"] > 0
            delivered = True
        else:
            assert resp.status_code >= 500 and set(answer["error"]) == {"type", "code", "message", "param"}, answer
            delivered = False
    if case in ("error200", "cut") and not stream:
        assert resp.status_code >= 500  # an error in a 200 body or a cut body is no answer, never billed as one

    # Settled before the last byte reached us: the log holds it already, and every event reads back.
    mine = [e for e in read_events(hostile_stack.events_path) if e.request_id == rid]
    kinds = [e.type for e in mine]
    assert kinds.count("request.admitted") == 1 and kinds.count("request.settled") == 1, kinds
    settled = next(e for e in mine if e.type == "request.settled")
    attempts = [e for e in mine if e.type == "request.attempted"]
    assert attempts, kinds
    if delivered:
        assert settled.cost_micro > 0, (case, settled)
    if case in BAD_COUNTS:
        assert attempts[-1].usage.source == "provider_invalid", attempts[-1]
        assert attempts[-1].usage_received
        assert settled.cost_micro > 0

    after = http.post("/v1/chat/completions", json={"model": "chat-openai", "max_completion_tokens": 16,
                                                    "messages": [{"role": "user", "content": "still served?"}]})
    assert after.status_code == 200, after.text


def test_invalid_usage_is_counted_per_deployment(hostile_stack: Stack, http: httpx.Client) -> None:
    resp = http.post("/v1/chat/completions", json={"model": "hostile-openai", "max_completion_tokens": 16,
                                                   "messages": [{"role": "user", "content": "neg"}]})
    assert resp.status_code == 200
    metrics = httpx.get(hostile_stack.gateway_url + "/metrics").text
    line = next(m for m in metrics.splitlines() if m.startswith('farebox_usage_invalid_total{deployment="hostile-openai"}'))
    assert float(line.split()[-1]) >= 1


@pytest.mark.parametrize("case", ("neg", "error200", "cut"))
@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_other_surfaces_end_a_broken_stream_in_their_own_shape(
    hostile_stack: Stack, http: httpx.Client, dialect: str, case: str,
) -> None:
    """Messages and Responses streams: one writer too, each ending in its own error event (or, when the failure
    came before the first byte, a whole error answer in the surface's shape); billed as on chat."""
    messages = http.post("/v1/messages", json={"model": f"hostile-{dialect}", "max_tokens": 64, "stream": True,
                                               "messages": [{"role": "user", "content": case}]})
    responses = http.post("/v1/responses", json={"model": f"hostile-{dialect}", "max_output_tokens": 64,
                                                 "stream": True, "input": case})
    for resp, last_ok, last_failed in ((messages, "message_stop", "error"),
                                       (responses, "response.completed", "response.failed")):
        mine = [e for e in read_events(hostile_stack.events_path) if e.request_id == resp.headers["x-fb-request-id"]]
        settled = [e for e in mine if e.type == "request.settled"]
        assert len(settled) == 1
        if resp.status_code != 200:  # failed before the first byte: one whole error, in the surface's shape
            assert case != "neg" and resp.status_code >= 500, resp.text
            error = resp.json()
            assert error["type"] == "error" if last_failed == "error" else set(error["error"]) >= {"code", "message"}
            continue
        assert "HTTP/1." not in resp.text
        kinds = [line[7:] for line in resp.text.splitlines() if line.startswith("event: ")]
        assert kinds[-1] == (last_ok if case == "neg" else last_failed), kinds[-3:]
        assert settled[0].cost_micro > 0  # content reached the client
