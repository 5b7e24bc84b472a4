"""A webhook receiver that hangs and then answers 500, behind a real gateway: requests are served at their
usual speed while the notifier waits on it; the alert is retried with backoff, then logged at error."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from tests.harness import running_stack

pytestmark = pytest.mark.e2e
HANG_S = 3.0  # longer than alerts.timeout_s: every delivery times out


class _Hanging(BaseHTTPRequestHandler):
    posts: list[tuple[float, str]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.posts.append((time.monotonic(), self.headers.get("X-Farebox-Event-Id", "")))
        time.sleep(HANG_S)
        try:
            self.send_response(500)
            self.end_headers()
        except OSError:  # the notifier gave up and closed the connection
            pass

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[str]:
    _Hanging.posts = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hanging)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    finally:
        server.shutdown()
        server.server_close()


def test_requests_never_wait_on_a_hanging_receiver_and_the_alert_is_logged(tmp_path: Path, receiver: str) -> None:
    def mutate(tree: dict) -> None:
        tree["alerts"] = {"webhook_url": receiver, "timeout_s": 1.0, "retries": 1, "backoff_s": 0.1}
        for scope in tree["budgets"]["scopes"]:
            if scope["scope"] == "team:platform":  # crossed after a few requests: a soft-threshold alert
                scope.update(monthly_limit="20.00", soft_pct=1)

    body = {"model": "chat-default", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 16}
    latencies: list[float] = []
    with running_stack(tmp_path, mutate=mutate) as stack:
        headers = {"Authorization": f"Bearer {stack.key}"}
        with httpx.Client(base_url=stack.gateway_url, headers=headers, timeout=10) as client:
            deadline = time.monotonic() + 20
            # Serve requests until the notifier has been stuck on the receiver for 1.5 s (its first try and its retry)
            while not (_Hanging.posts and time.monotonic() - _Hanging.posts[0][0] > 1.5):
                assert time.monotonic() < deadline, "no alert reached the receiver"
                started = time.monotonic()
                resp = client.post("/v1/chat/completions", json=body)
                latencies.append(time.monotonic() - started)
                assert resp.status_code == 200, resp.text
                time.sleep(0.05)
        log = stack.folder / "gateway.log"
        deadline = time.monotonic() + 15
        while "not delivered after 2 tries" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.1)
    # a delivery takes its 1 s timeout, twice: no request waited on it
    assert len(latencies) >= 10 and max(latencies) < 0.5, latencies
    ids = {event_id for _, event_id in _Hanging.posts}
    assert len(_Hanging.posts) == 2 and len(ids) == 1 and ids.pop().endswith("/soft")  # the try and its one retry
    first, retry = (t for t, _ in _Hanging.posts)
    assert retry - first >= 1.0  # after the first try's timeout and the backoff
    errors = [line for line in log.read_text().splitlines() if "not delivered after 2 tries" in line]
    assert len(errors) == 1 and "/soft" in errors[0]
    assert "alerts.webhook_url (webhook at 127.0.0.1) did not answer within 1s" in errors[0]
