"""Distributed mode: an Idempotency-Key claimed on one pod is answered on another, through Redis.

Real processes: Kafka (Maven jars), Redis, the Faust worker, two gateway pods.
A retry that lands on another pod replays the first pod's stored answer and is
not billed again: the requests topic holds one admission and one settlement.
A repeat while the first is in flight on the other pod gets 409. A stored response (Responses API) kept by
one pod is read and continued on the other.
"""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest

from infra.redis.server import RedisServer
from ledger.codec import decode
from tests.distributed.cluster import running_cluster, wait_until
from tests.infra.kafka.support import read_records, session_broker

pytestmark = pytest.mark.e2e

BODY = {"model": "chat-openai", "messages": [{"role": "user", "content": "once"}], "max_completion_tokens": 20}


@pytest.fixture(scope="module")
def redis_server():
    server = RedisServer().start()
    yield server
    server.cleanup()


def _post(url: str, key: str, idem: str, **headers: str) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json=BODY, timeout=30,
                      headers={"Authorization": f"Bearer {key}", "Idempotency-Key": idem, **headers})


def test_a_retry_on_another_pod_replays_and_is_billed_once(tmp_path, redis_server) -> None:
    broker = session_broker()
    with running_cluster(tmp_path, broker.bootstrap, redis_server.url, pods=2) as cluster:
        key = cluster.keys["alpha"]
        first = _post(cluster.pod_urls[0], key, "dist-1")
        assert first.status_code == 200, first.text
        again = _post(cluster.pod_urls[1], key, "dist-1")
        assert again.status_code == 200 and again.headers["x-fb-idempotent-replay"] == "true"
        assert again.content == first.content
        rid = first.json()["x_farebox"]["request_id"]

        slow: list[httpx.Response] = []
        worker = threading.Thread(target=lambda: slow.append(_post(cluster.pod_urls[0], key, "dist-2",
                                                                   **{"x-sim-ttft-ms": "1500"})))
        worker.start()
        time.sleep(0.5)
        busy = _post(cluster.pod_urls[1], key, "dist-2")
        worker.join()
        assert busy.status_code == 409 and busy.json()["error"]["code"] == "request_in_progress"
        assert slow[0].status_code == 200

        def mine():  # type: ignore[no-untyped-def]
            events = [decode(v) for *_, v in asyncio.run(read_records(broker.bootstrap, cluster.requests_topic))]
            kinds = [e.type for e in events if e.request_id == rid]
            return kinds if "request.settled" in kinds else False

        kinds = wait_until(mine, 30, what="the first request's settlement on the requests topic")
        assert kinds.count("request.admitted") == 1 and kinds.count("request.settled") == 1
        events = [decode(v) for *_, v in asyncio.run(read_records(broker.bootstrap, cluster.requests_topic))]
        assert sum(e.type == "request.admitted" for e in events) == 2  # dist-1 once, dist-2 once

        # a stored response (Responses API) kept by one pod is read and continued on the other, through Redis;
        # another team's key finds nothing
        auth = {"Authorization": f"Bearer {key}"}
        kept = httpx.post(cluster.pod_urls[0] + "/v1/responses", headers=auth, timeout=30,
                          json={"model": "chat-openai", "input": "Remember this.", "max_output_tokens": 16}).json()
        read = httpx.get(f"{cluster.pod_urls[1]}/v1/responses/{kept['id']}", headers=auth, timeout=30)
        assert read.status_code == 200 and read.json()["output"] == kept["output"]
        follow = httpx.post(cluster.pod_urls[1] + "/v1/responses", headers=auth, timeout=30, json={
            "model": "chat-openai", "input": "And?", "max_output_tokens": 16, "previous_response_id": kept["id"]})
        assert follow.status_code == 200 and follow.json()["usage"]["input_tokens"] > kept["usage"]["input_tokens"]
        other = {"Authorization": f"Bearer {cluster.keys['beta']}"}
        assert httpx.get(f"{cluster.pod_urls[1]}/v1/responses/{kept['id']}", headers=other,
                         timeout=30).status_code == 404
