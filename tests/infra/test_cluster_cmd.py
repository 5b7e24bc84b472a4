"""``farebox dev cluster up|down``: the whole distributed cluster on one machine, then nothing left running."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import openai

from infra.cluster import Cluster, alive
from infra.process import free_port

ROOT = Path(__file__).resolve().parents[2]


def _cluster(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "farebox", "dev", "cluster", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, check=False)


def _port_options(sim_port: int | None = None) -> list[str]:
    return ["--kafka-port", str(free_port()), "--redis-port", str(free_port()),
            "--postgres-port", str(free_port()), "--simulator-port", str(sim_port or free_port()),
            "--gateway-ports", f"{free_port()},{free_port()}"]


def _nothing_running(state: Path) -> None:
    cluster = Cluster.load(state)
    assert cluster is not None and cluster.processes
    assert [p["name"] for p in cluster.processes if alive(p)] == []


def test_up_serves_the_openai_sdk_through_both_pods_and_down_stops_everything(tmp_path: Path) -> None:
    state = tmp_path / "cluster"
    started = _cluster("up", "--state-dir", str(state), "--json", *_port_options())
    try:
        assert started.returncode == 0, started.stderr
        info = json.loads(started.stdout)
        names = [p["name"] for p in info["processes"]]
        assert names == ["kafka", "redis", "postgres", "simulator", "worker", "archiver", "pod-0", "pod-1"]
        config = Path(info["config"]).read_text()
        assert "mode: distributed" in config and "postgresql+psycopg://" in config
        for port in info["ports"]["gateways"]:
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=info["key"], max_retries=0,
                                   timeout=30)
            reply = client.chat.completions.create(model="chat-default",
                                                   messages=[{"role": "user", "content": f"hello pod {port}"}])
            assert reply.choices[0].message.content
            assert reply.usage is not None and reply.usage.total_tokens > 0
        status = _cluster("status", "--state-dir", str(state))
        assert status.returncode == 0 and status.stdout.count("running") == 8, status.stdout
    finally:
        stopped = _cluster("down", "--state-dir", str(state), timeout=120)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert stopped.stdout.count("stopped ") == 8
    _nothing_running(state)
    assert not _postgres_home(state).exists() or _postgres_home(state).is_relative_to(state)
    assert _cluster("status", "--state-dir", str(state)).returncode == 1


def test_a_taken_port_is_named_and_what_was_started_is_stopped(tmp_path: Path) -> None:
    state = tmp_path / "cluster"
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        done = _cluster("up", "--state-dir", str(state), *_port_options(sim_port=taken))
    assert done.returncode == 1
    assert f"error: port {taken} for the simulator is already taken" in done.stderr
    # Kafka, Redis and PostgreSQL had started before the simulator's turn: all stopped again
    for name in ("kafka", "redis", "postgres"):
        assert f"stopped {name} (pid" in done.stderr, done.stderr
    _nothing_running(state)
    assert not _postgres_home(state).exists() or _postgres_home(state).is_relative_to(state)
    assert json.loads((state / "cluster.json").read_text())["processes"][-1]["name"] == "postgres"


def _postgres_home(state: Path) -> Path:
    return Path(json.loads((state / "cluster.json").read_text())["extra"]["postgres_dir"])


def test_what_up_prints_names_every_service_its_address_and_the_dev_key(tmp_path: Path) -> None:
    """The text ``up`` prints without ``--json`` (``infra.cluster_config.summary``)."""
    from infra.cluster_config import Ports, summary

    ports = Ports(kafka=19092, redis=16380, postgres=15433, simulator=19090, gateways=(18081, 18082))
    text = summary(ports, tmp_path, "fb-dev-k3y")
    for line in ("gateway pod-0:  http://127.0.0.1:18081/v1", "gateway pod-1:  http://127.0.0.1:18082/v1",
                 "simulator:      http://127.0.0.1:19090", "kafka:          127.0.0.1:19092",
                 "redis:          redis://127.0.0.1:16380/0", "@127.0.0.1:15433/", "worker:", "archiver:",
                 f"config:         {tmp_path}/farebox.yaml", "export FAREBOX_KEY=fb-dev-k3y",
                 f"farebox dev cluster down --state-dir {tmp_path}"):
        assert line in text, line
