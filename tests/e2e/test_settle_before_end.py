"""The last byte waits for the settlement: kill -9 the gateway under load, and every answer a client saw
complete (a whole JSON body, or a stream up to ``[DONE]``) has its ``request.settled`` in the event log."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.harness import read_events, running_stack

pytestmark = pytest.mark.e2e

CLIENTS = 8


def _client(url: str, key: str, stream: bool, stop: threading.Event, complete: list[str]) -> None:
    body = {"model": "chat-openai", "messages": [{"role": "user", "content": "Tell me a short story."}],
            "max_completion_tokens": 32, "stream": stream}
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=10) as http:
        while not stop.is_set():
            try:
                if stream:
                    with http.stream("POST", "/v1/chat/completions", json=body) as resp:
                        rid = resp.headers.get("x-fb-request-id")
                        lines = list(resp.iter_lines())
                    if resp.status_code == 200 and "data: [DONE]" in lines:
                        complete.append(rid)
                else:
                    resp = http.post("/v1/chat/completions", json=body)
                    if resp.status_code == 200 and resp.json().get("choices"):
                        complete.append(resp.headers["x-fb-request-id"])
            except (httpx.HTTPError, ValueError):
                return  # the gateway is gone


def _load_then_kill(stack) -> list[str]:  # noqa: ANN001 - a harness Stack
    stop, complete = threading.Event(), []
    threads = [threading.Thread(target=_client, args=(stack.gateway_url, stack.key, i % 2 == 0, stop, complete))
               for i in range(CLIENTS)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while len(complete) < 40 and time.monotonic() < deadline:
        time.sleep(0.05)
    stack.gateway.kill()  # kill -9 mid-load: answers in flight, settlements in the writer's queue
    stack.gateway.wait()
    stop.set()
    for t in threads:
        t.join(15)
    assert len(complete) >= 40, f"only {len(complete)} answers completed before the kill"
    return list(complete)


def test_every_answer_seen_complete_is_settled_in_the_log(tmp_path: Path) -> None:
    with running_stack(tmp_path / "stack", sim_defaults={"tokens_per_s": 400, "output_tokens": 24}) as stack:
        seen: list[str] = []
        for round_ in range(2):
            seen += _load_then_kill(stack)
            stack.restart_gateway()  # the log the kill left reads back and the gateway serves again
        settled = {e.request_id for e in read_events(stack.events_path) if e.type == "request.settled"}
        missing = [rid for rid in seen if rid not in settled]
        assert not missing, f"{len(missing)} of {len(seen)} answers seen complete have no settlement: {missing[:5]}"
