"""Two distributed pods share config through the compacted config topic and circuit breakers through Redis.

The pods poll the config database only every 600 s here, so a change made on
pod 0 can reach pod 1 only through ``fb.config``. Pod 0 opens a breaker on
simulator 500s (``x-sim-fault``); pod 1, which never sent a failing request,
hears of it through Redis.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from infra.redis.server import RedisServer
from tests.distributed.cluster import Cluster, running_cluster, wait_until
from tests.harness import ROOT, stop
from tests.infra.kafka.support import session_broker

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"
BODY = {"model": "chat-openai", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 8}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, str]]:
    redis_server = RedisServer().start()
    folder = tmp_path_factory.mktemp("config-topic")
    try:
        with running_cluster(folder, session_broker().bootstrap, redis_server.url, pods=2,
                             lease={"config_db_poll_s": 600}) as c:
            out = subprocess.run([sys.executable, "-m", "farebox", "admin", "token", "create", "--config",
                                  str(c.config), "--name", "ops", "--role", "admin", "--json"],
                                 cwd=ROOT, check=True, capture_output=True, text=True)
            token = json.loads(out.stdout)["token"]
            # pod 0 restarts to read the token from the database; its first poll finds the topic
            # behind the database and publishes the snapshot; pod 1 can only get it from the topic
            assert stop(c.pods[0], timeout=40) == 0
            c.start_pod(0)
            yield c, token
    finally:
        redis_server.cleanup()


def h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_key_created_and_revoked_on_one_pod_reaches_the_other_through_the_topic(cluster) -> None:
    c, admin = cluster
    wait_until(lambda: httpx.get(c.pod_urls[1] + "/admin/v1/snapshot", headers=h(admin)).status_code == 200, 60,
               what="the admin token reaches pod 1 through the topic")
    resp = httpx.post(c.pod_urls[0] + "/admin/v1/keys", headers=h(admin),
                      json={"team": "alpha", "app": "app-alpha", "aliases": ["chat-openai"]})
    assert resp.status_code == 201, resp.text
    created = resp.json()
    wait_until(lambda: httpx.post(c.pod_urls[1] + CHAT, json=BODY, headers=h(created["key"]),
                                  timeout=30).status_code == 200, 60, what="the new key serves on pod 1")

    resp = httpx.post(f"{c.pod_urls[0]}/admin/v1/keys/{created['id']}:revoke", headers=h(admin))
    assert resp.status_code == 200 and resp.json()["revoked"] is True
    revoked_at = time.monotonic()

    def revoked_on_pod_1() -> bool:
        r = httpx.post(c.pod_urls[1] + CHAT, json=BODY, headers=h(created["key"]), timeout=30)
        return r.status_code == 401 and r.json()["error"]["code"] == "revoked_api_key"

    wait_until(revoked_on_pod_1, 60, interval=0.02, what="the revocation on pod 1")
    print(f"\n  revocation on pod 0 -> 401 on pod 1 through the topic: {(time.monotonic() - revoked_at) * 1000:.0f} ms")
    status = httpx.get(c.pod_urls[1] + "/admin/v1/snapshot", headers=h(admin)).json()
    zero = httpx.get(c.pod_urls[0] + "/admin/v1/snapshot", headers=h(admin)).json()
    assert status["source"] == "topic" and status["version"] == zero["version"] == status["topic_version"]
    assert status["content_hash"] == zero["content_hash"]


def test_a_breaker_opened_on_one_pod_opens_on_the_other(cluster) -> None:
    c, _ = cluster
    key = c.keys["beta"]
    with ThreadPoolExecutor(8) as pool:  # enough 500s for the breaker's min_requests, in parallel
        statuses = list(pool.map(lambda _: httpx.post(c.pod_urls[0] + CHAT, json=BODY, timeout=60,
                                                      headers={**h(key), "x-sim-fault": "500"}).status_code,
                                 range(80)))
    assert 200 not in statuses
    health = httpx.get(c.pod_urls[0] + "/health").json()
    assert "sim-openai-mumbai" in health["routing"]["breakers"] or any(
        t["deployment"] == "sim-openai-mumbai" and t["state"] == "open" for t in health["routing"]["transitions"])
    log = c.folder / "pod-1.log"
    wait_until(lambda: "circuit of deployment sim-openai-mumbai opened by pod pod-0" in log.read_text(), 30,
               what="pod 1 hears of the open")
