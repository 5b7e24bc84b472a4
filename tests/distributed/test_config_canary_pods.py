"""A config canary across two distributed pods: the candidate (a version routing chat-openai to a deployment
failing a fifth of its requests) is served to half the callers on both pods, both pods add their figures to the
config database, it is rolled back by its thresholds within its window, and both pods serve the baseline's
routing again (published as a new version, reaching the pods through the config topic)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from infra.redis.server import RedisServer
from tests.distributed.cluster import Cluster, running_cluster, wait_until
from tests.harness import ROOT, stop
from tests.infra.kafka.support import session_broker

pytestmark = pytest.mark.e2e
BAD = "sim-canary-bad"
CHAT = "/v1/chat/completions"


def bad_deployment(tree: dict) -> None:
    openai = next(d for d in tree["deployments"] if d["id"] == "sim-openai-mumbai")
    tree["deployments"].append({**openai, "id": BAD, "model": "canary-bad", "weight": 1})
    alias = next(a for a in tree["aliases"] if a["name"] == "chat-openai")
    alias["max_attempts"] = 1


def faults(tree: dict) -> None:
    tree["models"]["canary-bad"] = {"faults": {"rate_500": 0.2}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, str]]:
    redis_server = RedisServer().start()
    try:
        with running_cluster(tmp_path_factory.mktemp("canary-pods"), session_broker().bootstrap, redis_server.url,
                             pods=2, mutate=bad_deployment, sim_mutate=faults) as c:
            out = subprocess.run([sys.executable, "-m", "farebox", "admin", "token", "create", "--config",
                                  str(c.config), "--name", "ops", "--role", "admin", "--json"],
                                 cwd=ROOT, check=True, capture_output=True, text=True)
            token = json.loads(out.stdout)["token"]
            for i in range(2):  # each pod reads the token from the database as it starts again
                assert stop(c.pods[i], timeout=40) == 0
                c.start_pod(i)
            yield c, token
    finally:
        redis_server.cleanup()


def _traffic(c: Cluster, n: int, tag: str) -> dict[str, int]:
    served: dict[str, int] = {}
    key = next(iter(c.keys.values()))
    with httpx.Client(timeout=30) as client:
        for i in range(n):
            resp = client.post(c.pod_urls[i % 2] + CHAT, headers={"Authorization": f"Bearer {key}",
                                                                 "x-fb-session": f"{tag}-{i % 40}"},
                               json={"model": "chat-openai", "messages": [{"role": "user", "content": f"{tag} {i}"}],
                                     "max_completion_tokens": 4})
            dep = resp.headers.get("x-fb-deployment") if resp.status_code == 200 else f"error {resp.status_code}"
            served[dep] = served.get(dep, 0) + 1
    return served


def _rollout(c: Cluster, auth: dict, rollout_id: int) -> dict:
    data = httpx.get(c.pod_urls[1] + "/admin/v1/rollouts", headers=auth, timeout=10).json()["data"]
    return next(r for r in data if r["id"] == rollout_id)


def _deployments(c: Cluster, auth: dict, pod: int) -> list[str]:
    data = httpx.get(c.pod_urls[pod] + "/admin/v1/aliases", headers=auth, timeout=10).json()["data"]
    return next(a for a in data if a["name"] == "chat-openai")["deployments"]


def test_a_failing_candidate_is_rolled_back_across_pods(cluster) -> None:
    c, token = cluster
    auth = {"Authorization": f"Bearer {token}"}
    armed = httpx.post(c.pod_urls[0] + "/admin/v1/rollouts", headers=auth, timeout=10,
                       json={"stages": [50, 100], "window_s": 60, "thresholds": {"min_requests": 20}})
    assert armed.status_code == 201, armed.text
    rollout_id = armed.json()["id"]
    put = httpx.put(c.pod_urls[0] + "/admin/v1/aliases/chat-openai", headers=auth, timeout=10,
                    json={"kind": "chat", "deployments": [BAD], "max_attempts": 1})
    assert put.status_code == 200, put.text
    wait_until(lambda: _rollout(c, auth, rollout_id)["state"] == "running", 20, what="the rollout starts")
    wait_until(lambda: _deployments(c, auth, 1) == [BAD], 20, what="pod 1 has the candidate version")
    time.sleep(1.5)  # both pods' runners have read the running rollout
    started = time.monotonic()
    seen: dict[str, int] = {}
    while _rollout(c, auth, rollout_id)["state"] == "running" and time.monotonic() - started < 60:
        for dep, n in _traffic(c, 20, "split").items():
            seen[dep] = seen.get(dep, 0) + n
    done = _rollout(c, auth, rollout_id)
    assert done["state"] == "rolled_back" and "error rate" in done["reason"], done
    assert time.monotonic() - started < 60  # within its window
    assert seen.get("sim-openai-mumbai", 0) > 10 and seen.get(BAD, 0) > 10  # both versions served, both pods
    figures = done["figures"]
    assert figures["candidate"]["requests"] >= 20 and figures["baseline"]["requests"] >= 20
    for pod in range(2):  # the revert reaches both pods
        wait_until(lambda pod=pod: _deployments(c, auth, pod) == ["sim-openai-mumbai"], 30,
                   what=f"pod {pod} serves the baseline's routing again")
    time.sleep(1.5)
    assert _traffic(c, 20, "after") == {"sim-openai-mumbai": 20}
