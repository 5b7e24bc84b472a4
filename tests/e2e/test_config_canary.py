"""Config canaries end to end (embedded): a rollout armed through the admin API, the next config version served
to a share of callers first; one whose candidate fails a fifth of its requests is rolled back by its thresholds
(the baseline's routing published again, the reason in the audit log, an event and a metric), and a healthy one
is widened stage by stage to everyone."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Iterator

import httpx
import openai
import pytest

from ledger.events import ConfigRollout
from tests.harness import Stack, admin_token, generous_limits, read_events, running_stack

pytestmark = pytest.mark.e2e
GOOD, BAD = "sim-canary-good", "sim-canary-bad"


def deployments(tree: dict) -> None:
    compat = next(d for d in tree["deployments"] if d["id"] == "sim-compat-mumbai")
    tree["deployments"] += [{**compat, "id": GOOD, "model": "canary-good"}, {**compat, "id": BAD, "model": "canary-bad"}]
    tree["aliases"].append({"name": "chat-canary", "kind": "chat", "deployments": [GOOD], "max_attempts": 1})
    generous_limits(tree)


def faults(tree: dict) -> None:
    tree["models"]["canary-bad"] = {"faults": {"rate_500": 0.2}}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("rollout"), aliases="chat-canary", mutate=deployments,
                       sim_mutate=faults) as st:
        yield st


def _auth(stack: Stack, name: str) -> dict:
    return {"Authorization": f"Bearer {admin_token(stack.config, name, 'admin', live_at=stack.gateway_url)}"}


def _traffic(stack: Stack, n: int, tag: str) -> dict[str, int]:
    served: dict[str, int] = {}
    with openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key, max_retries=0) as client:
        for i in range(n):
            try:
                raw = client.chat.completions.with_raw_response.create(
                    model="chat-canary", messages=[{"role": "user", "content": f"{tag} {i}"}], max_tokens=4,
                    extra_headers={"x-fb-session": f"{tag}-caller-{i % 40}"})
                dep = raw.headers["x-fb-deployment"]
            except openai.APIStatusError as exc:
                dep = f"error {exc.status_code}"
            served[dep] = served.get(dep, 0) + 1
    return served


def _rollout(stack: Stack, auth: dict, rollout_id: int) -> dict:
    data = httpx.get(stack.gateway_url + "/admin/v1/rollouts", headers=auth, timeout=10).json()["data"]
    return next(r for r in data if r["id"] == rollout_id)


def _wait(stack: Stack, auth: dict, rollout_id: int, state: str, tag: str, timeout: float = 40) -> dict:
    deadline = time.monotonic() + timeout
    while (r := _rollout(stack, auth, rollout_id))["state"] != state and time.monotonic() < deadline:
        _traffic(stack, 10, tag)
    return r


def _alias_deployments(stack: Stack, auth: dict) -> list[str]:
    data = httpx.get(stack.gateway_url + "/admin/v1/aliases", headers=auth, timeout=10).json()["data"]
    return next(a for a in data if a["name"] == "chat-canary")["deployments"]


def _put_alias(stack: Stack, auth: dict, deps: list[str]) -> None:
    body = {"kind": "chat", "deployments": deps, "max_attempts": 1}
    resp = httpx.put(stack.gateway_url + "/admin/v1/aliases/chat-canary", headers=auth, json=body, timeout=10)
    assert resp.status_code == 200, resp.text


def test_a_failing_candidate_is_rolled_back_and_a_healthy_one_widened(stack: Stack) -> None:
    auth = _auth(stack, "ops-rollout")
    bad = {"stages": [50, 100], "window_s": 30, "thresholds": {"min_requests": 20}}
    started = httpx.post(stack.gateway_url + "/admin/v1/rollouts", headers=auth, json=bad, timeout=10)
    assert started.status_code == 201, started.text
    rollout = started.json()
    assert rollout["state"] == "armed"
    _put_alias(stack, auth, [BAD])  # the next version: the candidate, served to half the callers
    running = _wait(stack, auth, rollout["id"], "running", "warm", timeout=10)
    assert running["candidate"] > running["baseline"]
    time.sleep(1.5)  # every process's runner has read it (a tick a second)

    split = _traffic(stack, 80, "split")
    assert split.get(GOOD, 0) > 10 and split.get(BAD, 0) > 10  # both versions served at once
    done = _wait(stack, auth, rollout["id"], "rolled_back", "bad")
    assert done["state"] == "rolled_back" and "error rate" in done["reason"], done
    # the revert is the step's second write (a new config version, then the rollout names it): wait for it
    deadline = time.monotonic() + 10
    while done["reverted_to"] is None and time.monotonic() < deadline:
        time.sleep(0.1)
        done = _rollout(stack, auth, rollout["id"])
    assert done["figures"]["candidate"]["requests"] >= 20 and done["reverted_to"] > done["candidate"], done
    deadline = time.monotonic() + 10
    while _alias_deployments(stack, auth) != [GOOD] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _alias_deployments(stack, auth) == [GOOD]  # the baseline's routing published again, and live
    time.sleep(1.5)  # the runner has seen the revert live: the baseline is no longer kept apart
    assert _traffic(stack, 20, "after") == {GOOD: 20}  # everyone on the baseline once more

    audit = httpx.get(stack.gateway_url + "/admin/v1/audit?limit=50", headers=auth, timeout=10).json()["data"]
    assert any(a["action"] == "rollout.rollback" and "error rate" in (a["after"] or {}).get("reason", "")
               for a in audit)
    steps = [e for e in read_events(stack.events_path) if isinstance(e, ConfigRollout)]
    assert [e.action for e in steps] == ["start", "rollback"] and "error rate" in steps[-1].reason
    metrics = httpx.get(stack.gateway_url + "/metrics", timeout=10).text
    assert 'farebox_config_rollout_steps_total{action="rollback"} 1.0' in metrics

    healthy = {"stages": [25, 50, 100], "window_s": 2, "thresholds": {"min_requests": 10}}
    second = httpx.post(stack.gateway_url + "/admin/v1/rollouts", headers=auth, json=healthy, timeout=10).json()
    _put_alias(stack, auth, [GOOD, "sim-compat-mumbai"])
    done = _wait(stack, auth, second["id"], "completed", "healthy")
    assert done["state"] == "completed", done
    steps = [e.action for e in read_events(stack.events_path) if isinstance(e, ConfigRollout)
             and e.rollout_id == second["id"]]
    assert steps == ["start", "widen", "complete"]
    assert _alias_deployments(stack, auth) == [GOOD, "sim-compat-mumbai"]  # the candidate is everyone's now


def _cli(stack: Stack, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "farebox", "rollouts", *argv, "--config", str(stack.config)],
                          capture_output=True, text=True, timeout=60)


def test_the_cli_arms_a_rollout_shows_it_and_pauses_and_rolls_it_back_by_hand(stack: Stack) -> None:
    auth = _auth(stack, "ops-rollout-cli")
    armed = _cli(stack, "start", "--stages", "50,100", "--window-s", "600")
    assert armed.returncode == 0 and "armed on baseline version" in armed.stdout, armed.stderr
    rollout_id = int(armed.stdout.split()[1])
    before = _alias_deployments(stack, auth)
    _put_alias(stack, auth, [BAD])
    _wait(stack, auth, rollout_id, "running", "cli", timeout=10)
    paused = _cli(stack, "pause", str(rollout_id))
    assert paused.returncode == 0 and "paused at 50%" in paused.stdout, paused.stderr
    again = _cli(stack, "pause", str(rollout_id))
    assert again.returncode == 2 and "cannot pause" in again.stderr
    back = _cli(stack, "rollback", str(rollout_id))
    assert back.returncode == 0 and "rolled back" in back.stdout, back.stderr
    (shown,) = [r for r in json.loads(_cli(stack, "list", "--json").stdout) if r["id"] == rollout_id]
    assert shown["state"] == "rolled_back" and shown["reason"].startswith("rollback by cli:")
    deadline = time.monotonic() + 10
    while _alias_deployments(stack, auth) != before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _alias_deployments(stack, auth) == before
    assert _cli(stack, "widen", "999").returncode == 2  # an unknown id: named, exit 2
    time.sleep(1.5)  # the gateway's runner has noticed the steps taken by hand
    steps = [e.action for e in read_events(stack.events_path) if isinstance(e, ConfigRollout)
             and e.rollout_id == rollout_id]
    assert steps == ["start", "pause", "rollback"]


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("rollout-workers"), aliases="chat-canary", mutate=deployments,
                       sim_mutate=faults, serve_args=("--workers", "2")) as st:
        yield st


def test_with_workers_every_process_counts_and_one_rolls_back(workers: Stack) -> None:
    auth = _auth(workers, "ops-rollout-workers")
    armed = httpx.post(workers.gateway_url + "/admin/v1/rollouts", headers=auth, timeout=10,
                       json={"stages": [50, 100], "window_s": 60, "thresholds": {"min_requests": 20}}).json()
    _put_alias(workers, auth, [BAD])
    _wait(workers, auth, armed["id"], "running", "warm", timeout=10)
    time.sleep(1.5)
    done = _wait(workers, auth, armed["id"], "rolled_back", "bad")
    assert done["state"] == "rolled_back" and "error rate" in done["reason"], done
    steps = [e for e in read_events(workers.events_path) if isinstance(e, ConfigRollout) and e.rollout_id == armed["id"]]
    assert [e.action for e in steps] == ["start", "rollback"]  # once each, however many processes saw them
