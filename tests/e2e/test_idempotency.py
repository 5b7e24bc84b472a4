"""Idempotent retries end to end: the official openai SDK, its own retry on a cut connection, one bill.

A small TCP proxy sits between the SDK and the gateway. It drops the first
connection after the gateway has answered (the answer never reaches the
caller), then forwards every later connection untouched. The SDK retries the
connection error by itself (``max_retries``) with the same ``Idempotency-Key``
(passed in ``extra_headers``); the gateway replays the stored answer.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import openai
import pytest

from ledger.events import RequestAdmitted, RequestSettled
from tests.harness import Stack, read_events

pytestmark = pytest.mark.e2e

MSGS = [{"role": "user", "content": "Book the table for two."}]


class CuttingProxy:
    """Forwards TCP to the gateway; swallows the gateway's answer on the first ``cut`` connections."""

    def __init__(self, upstream_port: int, cut: int = 1) -> None:
        self.upstream_port, self.cut = upstream_port, cut
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.swallowed = 0  # bytes of answers that never reached the caller
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            drop = self.connections <= self.cut
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, drop), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, drop: bool) -> None:
        try:
            while data := src.recv(65536):
                if drop:
                    self.swallowed += len(data)
                    src.settimeout(0.3)  # the rest of the answer, then cut the caller off
                    continue
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def proxy(stack: Stack) -> Iterator[CuttingProxy]:
    p = CuttingProxy(int(stack.gateway_url.rsplit(":", 1)[1]))
    yield p
    p.close()


def _settled(stack: Stack, request_id: str, wait_s: float = 5.0) -> list:
    deadline = time.monotonic() + wait_s
    while True:
        mine = [e for e in read_events(stack.events_path) if e.request_id == request_id]
        if any(isinstance(e, RequestSettled) for e in mine) or time.monotonic() > deadline:
            return mine
        time.sleep(0.05)


def test_a_cut_answer_is_retried_by_the_sdk_and_billed_once(stack: Stack, proxy: CuttingProxy) -> None:
    key = f"order-{time.time_ns()}"
    with openai.OpenAI(base_url=f"http://127.0.0.1:{proxy.port}/v1", api_key=stack.key, max_retries=2) as sdk:
        raw = sdk.chat.completions.with_raw_response.create(
            model="chat-openai", messages=MSGS, max_completion_tokens=30, extra_headers={"Idempotency-Key": key})
    assert proxy.connections >= 2 and proxy.swallowed > 0  # the first answer was cut off, the SDK retried
    assert raw.headers["x-fb-idempotent-replay"] == "true"
    replayed = raw.parse()
    rid = replayed.model_extra["x_farebox"]["request_id"]
    events = _settled(stack, rid)
    assert [type(e) for e in events if isinstance(e, (RequestAdmitted, RequestSettled))] == [
        RequestAdmitted, RequestSettled]
    settled = next(e for e in events if isinstance(e, RequestSettled))
    assert settled.cost_micro == replayed.model_extra["x_farebox"]["cost_micro"] > 0
    # the same answer again, straight from the gateway: identical, and still one settlement
    with openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key, max_retries=0) as direct:
        again = direct.chat.completions.with_raw_response.create(
            model="chat-openai", messages=MSGS, max_completion_tokens=30, extra_headers={"Idempotency-Key": key})
    assert again.parse().model_dump() == replayed.model_dump()
    time.sleep(0.3)
    all_events = read_events(stack.events_path)
    assert sum(isinstance(e, RequestSettled) and e.request_id == rid for e in all_events) == 1



def test_a_cut_embeddings_answer_is_retried_by_the_sdk_and_billed_once(stack: Stack, proxy: CuttingProxy) -> None:
    key = f"embed-{time.time_ns()}"
    texts = ["first text to embed", "second text to embed"]
    with openai.OpenAI(base_url=f"http://127.0.0.1:{proxy.port}/v1", api_key=stack.key, max_retries=2) as sdk:
        raw = sdk.embeddings.with_raw_response.create(model="embed-default", input=texts,
                                                      extra_headers={"Idempotency-Key": key})
    assert proxy.connections >= 2 and proxy.swallowed > 0  # the first answer was cut off, the SDK retried
    assert raw.headers["x-fb-idempotent-replay"] == "true"
    rid = raw.headers["x-fb-replay-of"]
    events = _settled(stack, rid)
    assert [type(e) for e in events if isinstance(e, (RequestAdmitted, RequestSettled))] == [
        RequestAdmitted, RequestSettled]
    replayed = raw.parse()
    assert len(replayed.data) == 2 and replayed.usage.prompt_tokens > 0
    with openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key, max_retries=0) as direct:
        again = direct.embeddings.with_raw_response.create(model="embed-default", input=texts,
                                                            extra_headers={"Idempotency-Key": key})
        assert again.headers["x-fb-idempotent-replay"] == "true"
        assert again.parse().model_dump() == replayed.model_dump()
        with pytest.raises(openai.UnprocessableEntityError) as reused:
            direct.embeddings.create(model="embed-default", input=texts[:1], extra_headers={"Idempotency-Key": key})
    assert reused.value.code == "idempotency_key_reused"
    time.sleep(0.3)
    assert sum(isinstance(e, RequestSettled) and e.request_id == rid for e in read_events(stack.events_path)) == 1


def _post(stack: Stack, body: dict, idem_key: str) -> tuple[int, dict]:
    req = urllib.request.Request(stack.gateway_url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Authorization": f"Bearer {stack.key}", "Content-Type": "application/json",
                                          "Idempotency-Key": idem_key})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_a_reused_key_with_another_body_is_422_and_a_bad_key_400(stack: Stack) -> None:
    key = f"reuse-{time.time_ns()}"
    body = {"model": "chat-openai", "messages": MSGS, "max_completion_tokens": 10}
    assert _post(stack, body, key)[0] == 200
    status, err = _post(stack, {**body, "max_completion_tokens": 11}, key)
    assert status == 422 and err["error"]["code"] == "idempotency_key_reused" and key in err["error"]["message"]
    for bad in (" ", "k" * 256):
        status, err = _post(stack, body, bad)
        assert status == 400 and err["error"]["param"] == "Idempotency-Key"


def test_a_stream_retried_with_the_same_key_is_linked_to_the_first(stack: Stack, client: openai.OpenAI) -> None:
    key = f"stream-{time.time_ns()}"
    ids = []
    for _ in range(2):
        with client.chat.completions.with_streaming_response.create(
                model="chat-openai", messages=MSGS, stream=True, extra_headers={"Idempotency-Key": key}) as s:
            ids.append(s.headers["x-fb-request-id"])
            for _ in s.iter_lines():
                pass
    time.sleep(0.3)
    admitted = {e.request_id: e for e in read_events(stack.events_path) if isinstance(e, RequestAdmitted)}
    assert admitted[ids[0]].retry_of is None and admitted[ids[1]].retry_of == ids[0]


def test_an_answer_is_replayed_after_the_gateway_is_killed_and_started_again(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """The records live on disk (``server.idempotency_store: disk``, the default): a client retrying across a
    gateway's restart gets the stored answer, billed once."""
    from tests.harness import running_stack

    with running_stack(tmp_path_factory.mktemp("idem-restart"), aliases="chat-openai") as st:
        key = f"restart-{time.time_ns()}"
        with openai.OpenAI(base_url=st.gateway_url + "/v1", api_key=st.key, max_retries=0) as client:
            first = client.chat.completions.with_raw_response.create(
                model="chat-openai", messages=MSGS, max_completion_tokens=10, extra_headers={"Idempotency-Key": key})
            st.restart_gateway(kill=True)
            again = client.chat.completions.with_raw_response.create(
                model="chat-openai", messages=MSGS, max_completion_tokens=10, extra_headers={"Idempotency-Key": key})
        assert again.headers.get("x-fb-idempotent-replay") == "true"
        assert again.parse().id == first.parse().id and again.parse().choices[0].message.content == \
            first.parse().choices[0].message.content
        settled = [e for e in read_events(st.events_path) if isinstance(e, RequestSettled)]
        assert len(settled) == 1  # billed once
        assert (st.folder / "idempotency.sqlite").exists()
