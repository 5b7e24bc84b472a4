"""The config database (a real PostgreSQL) goes away: pods keep serving, admin writes get 503, restart resumes."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from infra.postgres.server import PostgresServer
from tests import harness
from tests.harness import ROOT, free_port, sim_config, spawn, stop, wait_http

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

CHAT = "/v1/chat/completions"
BODY = {"model": "chat-openai", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 8}


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    with PostgresServer() as server:  # fails, never skips, if PostgreSQL cannot start
        yield server


def cli(config: Path, *args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "farebox", *args, "--config", str(config)], cwd=ROOT,
                         check=True, capture_output=True, text=True)
    return out.stdout


def test_database_outage_serves_last_good_snapshot_and_refuses_writes(pg: PostgresServer, tmp_path: Path) -> None:
    url = pg.create_database("farebox_outage")
    sim_port, gw_port = free_port(), free_port()
    config = harness.test_config(tmp_path, sim_port, gw_port,
                                 lambda t: t.update(control_db={"url": url, "poll_interval_s": 0.2}))
    sim = spawn(["farebox", "simulator", "--config", str(sim_config(tmp_path)), "--port", str(sim_port)],
                tmp_path / "simulator.log")
    gw = None
    base = f"http://127.0.0.1:{gw_port}"
    try:
        wait_http(f"http://127.0.0.1:{sim_port}/_sim/health", sim, tmp_path / "simulator.log")
        import json

        admin = json.loads(cli(config, "admin", "token", "create", "--name", "ops", "--role", "admin", "--json"))["token"]
        key = json.loads(subprocess.run(
            [sys.executable, "-m", "farebox", "keys", "create", "--config", str(config), "--team", "platform",
             "--app", "playground", "--aliases", "chat-openai", "--json"],
            cwd=ROOT, check=True, capture_output=True, text=True).stdout)["key"]
        gw = spawn(["farebox", "serve", "--config", str(config)], tmp_path / "gateway.log")
        wait_http(base + "/health", gw, tmp_path / "gateway.log")
        auth = {"Authorization": f"Bearer {key}"}
        adm = {"Authorization": f"Bearer {admin}"}
        assert httpx.post(base + CHAT, json=BODY, headers=auth).status_code == 200
        team = {"business_unit": "retail"}
        assert httpx.put(base + "/admin/v1/teams/growth", json=team, headers=adm).status_code == 200

        pg.stop()  # the config database is gone
        for _ in range(5):
            assert httpx.post(base + CHAT, json=BODY, headers=auth).status_code == 200
        t0 = time.monotonic()
        down = httpx.put(base + "/admin/v1/teams/growth2", json=team, headers=adm, timeout=15)
        assert down.status_code == 503, down.text
        assert down.json()["error"]["code"] == "control_unavailable" and "last good snapshot" in down.json()["error"]["message"]
        assert time.monotonic() - t0 < 5, "a down database must fail admin writes fast"
        assert httpx.get(base + "/admin/v1/budgets/team:platform", headers=adm).status_code == 200  # reads still work
        time.sleep(0.5)
        status = httpx.get(base + "/admin/v1/snapshot", headers=adm).json()
        assert status["database"] == "unreachable"

        # a pod (re)started while the database is down starts from the last good snapshot on disk
        stop(gw)
        gw = spawn(["farebox", "serve", "--config", str(config)], tmp_path / "gateway.log")
        wait_http(base + "/health", gw, tmp_path / "gateway.log")
        assert httpx.post(base + CHAT, json=BODY, headers=auth).status_code == 200
        status = httpx.get(base + "/admin/v1/snapshot", headers=adm).json()
        assert status["source"] == "disk" and "growth" in {t["name"] for t in httpx.get(
            base + "/admin/v1/teams", headers=adm).json()["data"]}
        assert httpx.put(base + "/admin/v1/teams/growth2", json=team, headers=adm).status_code == 503

        pg.start()  # the database is back: everything resumes without a restart
        deadline = time.monotonic() + 10
        while httpx.get(base + "/admin/v1/snapshot", headers=adm).json().get("source") != "database":
            assert time.monotonic() < deadline, "the pod did not reconnect"
            time.sleep(0.1)
        ok = httpx.put(base + "/admin/v1/teams/growth2", json=team, headers=adm)
        assert ok.status_code == 200, ok.text
        created = httpx.post(base + "/admin/v1/keys", headers=adm,
                             json={"team": "platform", "app": "playground", "aliases": ["chat-openai"]})
        assert created.status_code == 201, created.text
        assert httpx.post(base + CHAT, json=BODY, headers={"Authorization": f"Bearer {created.json()['key']}"}
                          ).status_code == 200
        log = (tmp_path / "gateway.log").read_text()
        assert "unreachable" in log
    finally:
        if gw is not None:
            stop(gw)
        stop(sim)
