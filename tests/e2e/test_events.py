"""Every request's record in the event log: admitted once, attempted, settled once, priced exactly."""

from __future__ import annotations

import time
from collections import Counter, defaultdict

import openai
import pytest

from ledger.events import RequestAdmitted, RequestAttempted, RequestSettled
from tests.harness import Stack, read_events

pytestmark = pytest.mark.e2e


def events_of(stack: Stack, request_id: str, settle_wait: float = 5.0) -> list:
    deadline = time.monotonic() + settle_wait
    while True:
        mine = [e for e in read_events(stack.events_path) if e.request_id == request_id]
        if any(isinstance(e, RequestSettled) for e in mine) or time.monotonic() > deadline:
            return mine
        time.sleep(0.05)


def test_cost_checked_by_hand(client: openai.OpenAI, stack: Stack) -> None:
    """338 uncached + 1,536 cached input + 212 output at $2 / $0.20 / $10 per 1M, ₹88/$ -> ₹0.273082."""
    prompt = " ".join(["word"] * 1871)  # simulator: 1871 tokens + 3 framing = 1874 input tokens
    resp = client.chat.completions.create(
        model="chat-openai",
        messages=[{"role": "user", "content": prompt}],
        max_completion_tokens=500,
        extra_headers={"x-sim-cached-tokens": "1536", "x-sim-output-tokens": "212"},
    )
    assert resp.usage.prompt_tokens == 1874
    assert resp.usage.prompt_tokens_details.cached_tokens == 1536
    assert resp.usage.completion_tokens == 212
    fb = resp.model_extra["x_farebox"]
    assert fb["cost_micro"] == 273_082 and fb["cost"] == "0.273082" and fb["currency"] == "INR"
    events = events_of(stack, fb["request_id"])
    attempted = [e for e in events if isinstance(e, RequestAttempted)]
    settled = [e for e in events if isinstance(e, RequestSettled)]
    assert [a.cost_micro for a in attempted] == [273_082]
    assert attempted[0].usage.input == 338 and attempted[0].usage.cached_input == 1536
    assert settled[0].cost_micro == 273_082 and settled[0].overrun_micro == 0
    assert all(v == 273_082 for v in settled[0].cost_by_scope.values())


def test_every_request_admitted_attempted_settled_once(client: openai.OpenAI, stack: Stack) -> None:
    ids: list[str] = []
    msgs = [{"role": "user", "content": "count me"}]

    def rid(raw) -> str:
        return raw.headers["x-fb-request-id"]

    for alias in ("chat-openai", "chat-anthropic", "chat-default"):
        ids.append(rid(client.chat.completions.with_raw_response.create(model=alias, messages=msgs)))
        with client.chat.completions.with_streaming_response.create(
            model=alias, messages=msgs, stream=True, stream_options={"include_usage": True}
        ) as s:
            ids.append(rid(s))
            list(s.iter_lines())
    ids.append(rid(client.embeddings.with_raw_response.create(model="embed-default", input="x")))
    # Failures after admission are recorded too: provider 503 on every candidate, and a context-length 400.
    for fault, error in (("503", openai.InternalServerError), ("context_length", openai.BadRequestError)):
        with pytest.raises(error) as err:
            client.chat.completions.create(model="chat-default", messages=msgs, extra_headers={"x-sim-fault": fault})
        ids.append(err.value.response.headers["x-fb-request-id"])
    # A stream cut mid-way by the provider: partial text, then one error event.
    with pytest.raises(openai.APIError):
        with client.chat.completions.with_streaming_response.create(
            model="chat-openai", messages=msgs, stream=True,
            extra_headers={"x-sim-fault": "disconnect", "x-sim-disconnect-after": "3"},
        ) as s:
            ids.append(rid(s))
            lines = [ln for ln in s.iter_lines() if ln]
            assert sum('"error"' in ln for ln in lines) == 1 and lines[-1].startswith('data: {"error"')
            raise openai.APIError("stream ended with an error event", request=None, body=None)  # type: ignore[arg-type]

    deadline = time.monotonic() + 5
    while True:
        by_id: dict[str, Counter] = defaultdict(Counter)
        for e in read_events(stack.events_path):
            if e.request_id in ids:
                by_id[e.request_id][e.type] += 1
        if all(by_id[i]["request.settled"] for i in ids) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for i in ids:
        counts = by_id[i]
        assert counts["request.admitted"] == 1, (i, counts)
        assert counts["request.attempted"] >= 1, (i, counts)
        assert counts["request.settled"] == 1, (i, counts)
    events = [e for e in read_events(stack.events_path) if e.request_id in ids]
    failed = [e for e in events if isinstance(e, RequestSettled) and e.final_status != 200]
    assert sorted(e.final_status for e in failed) == [400, 503, 503]
    assert len({e.id for e in events}) == len(events)


def test_rejected_before_admission_leaves_no_events(stack: Stack, client: openai.OpenAI) -> None:
    before = len(read_events(stack.events_path))
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="chat-default", messages=[])
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    time.sleep(0.3)
    admitted = [e for e in read_events(stack.events_path)[before:] if isinstance(e, RequestAdmitted)]
    assert admitted == []


def test_provider_keys_never_written(client: openai.OpenAI, stack: Stack) -> None:
    """After successes and failures, no provider key is in the event log, the logs or an error body."""
    secrets = [b"sk-sim-openai-retail-0001", b"sk-sim-anthropic-retail-0001"]
    bodies = []
    for fault in ("429", "500", "content_policy", "context_length"):
        try:
            client.chat.completions.create(model="chat-default", messages=[{"role": "user", "content": "x"}],
                                           extra_headers={"x-sim-fault": fault})
        except openai.APIStatusError as exc:
            bodies.append(exc.response.content)
    time.sleep(0.3)
    blobs = [stack.events_path.read_bytes(), (stack.folder / "gateway.log").read_bytes(), *bodies]
    for wal in stack.folder.glob("events.sqlite*"):
        blobs.append(wal.read_bytes())
    for secret in secrets:
        assert not any(secret in blob for blob in blobs)
