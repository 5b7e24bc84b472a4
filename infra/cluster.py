"""``farebox dev cluster up|down|status``: a distributed farebox on one machine, as detached processes.

``up`` starts, in order, each after checking its port is free: Kafka (the
Maven-jar KRaft broker, with farebox's topics), Redis, PostgreSQL (the config
database), the provider simulator; then writes the distributed config, mints
a dev key with ``farebox keys create`` (which migrates and seeds the
database), starts the worker, the archiver and the gateway pods, and waits
until a chat completion goes through every pod. Every process runs in its
own session (it outlives the command) and is recorded in
``<state>/cluster.json`` as soon as it starts, so ``down`` finds all of it.

Invariants: a failed ``up`` (a port taken, a process that exits or never
gets ready) stops everything it started before it returns, and says what
failed; ``down`` signals only pids whose command line is still the one
recorded (a recycled pid is left alone). Each ``up`` starts fresh: it
refuses while a cluster is running and clears the state of a stopped one.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from infra.cluster_config import (
    DEV_ALIASES,
    DEV_APP,
    DEV_TEAM,
    EXAMPLES,
    PARTITIONS,
    ROOT,
    Ports,
    cluster_config,
    duplicate_ports,
    owner_only_secrets,
    postgres_url,
    summary,
)
from infra.cluster_services import postgres_home, start_postgres, start_redis

STATE_FILE = "cluster.json"


class ClusterError(RuntimeError):
    """The cluster could not be started (the message says which service and why)."""


def port_taken(port: int) -> bool:
    """True when something listens on (or holds) 127.0.0.1:port."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def alive(proc: dict[str, Any]) -> bool:
    """The recorded process is running and is still the one we started (its command line matches)."""
    cmd = _cmdline(proc["pid"])
    return bool(cmd) and proc["match"] in cmd and not _zombie(proc["pid"])


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return True


@dataclass
class Cluster:
    """The state folder and what was started in it (``cluster.json``)."""

    state: Path
    ports: Ports = field(default_factory=Ports)
    processes: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, state: Path) -> Cluster | None:
        try:
            raw = json.loads((state / STATE_FILE).read_text())
        except (OSError, ValueError):
            return None
        ports = Ports(**{**raw["ports"], "gateways": tuple(raw["ports"]["gateways"])})
        return cls(state, ports, raw["processes"], raw.get("extra", {}))

    def save(self) -> None:
        body = {"ports": self.ports.as_dict(), "processes": self.processes, "extra": self.extra}
        (self.state / STATE_FILE).write_text(json.dumps(body, indent=2))

    def record(self, name: str, pid: int, match: str, signum: int = signal.SIGTERM) -> None:
        self.processes.append({"name": name, "pid": pid, "match": match, "signal": int(signum)})
        self.save()

    def running(self) -> list[dict[str, Any]]:
        return [p for p in self.processes if alive(p)]


def stop_all(cluster: Cluster, timeout_s: float = 40.0, say: Callable[[str], None] = print) -> list[str]:
    """Stop every recorded process, last started first; the names of those that had to be killed."""
    killed = []
    for proc in reversed(cluster.processes):
        if not alive(proc):
            continue
        os.kill(proc["pid"], proc.get("signal", signal.SIGTERM))
        deadline = time.monotonic() + timeout_s
        while alive(proc) and time.monotonic() < deadline:
            time.sleep(0.1)
        if alive(proc):
            os.kill(proc["pid"], signal.SIGKILL)
            killed.append(proc["name"])
        say(f"stopped {proc['name']} (pid {proc['pid']})")
    _drop_outside_data(cluster)
    return killed


def _drop_outside_data(cluster: Cluster) -> None:
    """PostgreSQL's data, when it had to live outside the state folder (see ``postgres_home``), goes with the
    cluster: each ``up`` starts fresh, and nothing of it should stay behind in the temp dir."""
    home = cluster.extra.get("postgres_dir")
    if home and not Path(home).is_relative_to(cluster.state) and not cluster.running():
        shutil.rmtree(home, ignore_errors=True)


def _spawn(cluster: Cluster, name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen:
    """``python -m farebox ARGS`` detached, output in ``<state>/<name>.log``, recorded at once."""
    log = open(cluster.state / f"{name}.log", "ab")
    try:
        proc = subprocess.Popen([sys.executable, "-m", "farebox", *args], cwd=ROOT, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)
    finally:
        log.close()
    cluster.record(name, proc.pid, f"farebox {args[0]}")
    return proc


def _wait_http(name: str, url: str, proc: subprocess.Popen, log: Path, timeout_s: float,
               body: bytes | None = None, headers: dict[str, str] | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ClusterError(f"{name} exited ({proc.returncode}); the end of {log}:\n{_tail(log)}")
        try:
            req = urllib.request.Request(url, data=body, headers=headers or {})
            with urllib.request.urlopen(req, timeout=10) as resp:
                if resp.status == 200:
                    return
        except OSError as exc:  # URLError and HTTPError are OSErrors: not ready yet
            last = str(exc)
        time.sleep(0.25)
    raise ClusterError(f"{name} not ready at {url} in {timeout_s:.0f}s (last: {last}); the end of {log}:\n{_tail(log)}")


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"


def _claim(name: str, port: int) -> None:
    if port_taken(port):
        raise ClusterError(f"port {port} for the {name} is already taken (choose another with its option)")


def _fresh_state(state: Path) -> None:
    """An empty state folder: a stopped cluster's state is cleared; a folder that is not one is refused."""
    if state.exists() and any(state.iterdir()):
        old = Cluster.load(state)
        if old is None:
            raise ClusterError(f"{state} is not empty and holds no {STATE_FILE}: choose another --state-dir")
        if old.running():
            names = ", ".join(p["name"] for p in old.running())
            raise ClusterError(f"a cluster is already running in {state} ({names}): "
                               f"farebox dev cluster down --state-dir {state}")
        shutil.rmtree(state)
    state.mkdir(parents=True, exist_ok=True)


def up(state: Path, ports: Ports, env: dict[str, str], say: Callable[[str], None] = print) -> tuple[Cluster, str]:
    """Start the cluster; (cluster, dev key). On any failure everything started is stopped, then ClusterError."""
    clashes = duplicate_ports(ports)
    if clashes:
        raise ClusterError("the same port for two services: " + "; ".join(clashes))
    state = state.resolve()
    _fresh_state(state)
    cluster = Cluster(state, ports)
    cluster.save()
    try:
        key = _start(cluster, env, say)
    except BaseException as exc:
        say(f"cluster start failed: {exc}" if isinstance(exc, ClusterError) else "cluster start interrupted")
        say("stopping what was started")
        stop_all(cluster, say=say)
        raise
    return cluster, key


def _start(cluster: Cluster, env: dict[str, str], say: Callable[[str], None]) -> str:
    import asyncio

    from infra.kafka.broker import KafkaBroker
    from infra.kafka.topics import create_topics, farebox_topics
    from infra.process import free_port

    state, ports = cluster.state, cluster.ports
    _claim("kafka", ports.kafka)
    broker = KafkaBroker(port=ports.kafka, controller_port=free_port(), data_dir=state / "kafka")
    try:
        broker.start(detach=True)
    finally:
        if broker.pid is not None:
            cluster.record("kafka", broker.pid, "kafka.Kafka")
    asyncio.run(create_topics(broker.bootstrap, farebox_topics(PARTITIONS)))
    say(f"kafka ready at {broker.bootstrap}")

    _claim("redis", ports.redis)
    start_redis(ports.redis, state / "redis", cluster.record)
    say(f"redis ready on {ports.redis}")
    _claim("postgres", ports.postgres)
    cluster.extra["postgres_dir"] = str(postgres_home(state / "postgres"))
    cluster.save()
    start_postgres(ports.postgres, Path(cluster.extra["postgres_dir"]), cluster.record)
    say(f"postgres ready on {ports.postgres}")

    _claim("simulator", ports.simulator)
    sim = _spawn(cluster, "simulator", ["simulator", "--config", str(EXAMPLES / "simulator.yaml"),
                                        "--port", str(ports.simulator)], env)
    _wait_http("simulator", f"http://127.0.0.1:{ports.simulator}/_sim/health", sim, state / "simulator.log", 30)

    config = state / "farebox.yaml"
    example = yaml.safe_load((EXAMPLES / "farebox.yaml").read_text())
    owner_only_secrets(state)
    config.write_text(yaml.safe_dump(cluster_config(example, ports, state), sort_keys=False))
    key = _mint_key(config, env)
    say(f"config database migrated and seeded: {postgres_url(ports.postgres)}")

    _spawn(cluster, "worker", ["worker", "--config", str(config)], env)
    _spawn(cluster, "archiver", ["archiver", "--config", str(config)], env)
    pods = []
    for i, port in enumerate(ports.gateways):
        _claim(f"gateway pod-{i}", port)
        pods.append(_spawn(cluster, f"pod-{i}", ["serve", "--config", str(config), "--port", str(port)],
                           {**env, "FAREBOX_POD_ID": f"pod-{i}"}))
    chat = json.dumps({"model": "chat-default", "max_tokens": 4,
                       "messages": [{"role": "user", "content": "ready?"}]}).encode()
    headers = {"Authorization": f"Bearer {key}", "content-type": "application/json"}
    for i, (port, proc) in enumerate(zip(ports.gateways, pods)):
        log = state / f"pod-{i}.log"
        _wait_http(f"gateway pod-{i}", f"http://127.0.0.1:{port}/health", proc, log, 60)
        # ready means served: the worker has joined its group and grants leases
        _wait_http(f"gateway pod-{i} (first chat completion)", f"http://127.0.0.1:{port}/v1/chat/completions",
                   proc, log, 120, body=chat, headers=headers)
    for proc in cluster.processes:
        if not alive(proc):
            raise ClusterError(f"{proc['name']} exited; see {state}/{proc['name']}.log")
    return key


def _mint_key(config: Path, env: dict[str, str]) -> str:
    """A dev key through the real path (``farebox keys create``: migrates and seeds the config database)."""
    done = subprocess.run([sys.executable, "-m", "farebox", "keys", "create", "--config", str(config),
                           "--team", DEV_TEAM, "--app", DEV_APP, "--aliases", DEV_ALIASES, "--json"],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ClusterError(f"farebox keys create failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return json.loads(done.stdout)["key"]


def down(state: Path, say: Callable[[str], None] = print) -> int:
    """Stop the cluster recorded in ``state``; 0 when nothing of it is left running."""
    cluster = Cluster.load(state.resolve())
    if cluster is None:
        say(f"no cluster in {state}")
        return 0
    if not cluster.running():
        say("nothing running")
        return 0
    stop_all(cluster, say=say)
    left = cluster.running()
    if left:
        say("still running: " + ", ".join(f"{p['name']} (pid {p['pid']})" for p in left))
        return 1
    return 0


def status(state: Path) -> tuple[Cluster | None, list[dict[str, Any]]]:
    """The recorded cluster and which of its processes run."""
    cluster = Cluster.load(state.resolve())
    return cluster, (cluster.running() if cluster else [])


__all__ = ["Cluster", "ClusterError", "Ports", "down", "port_taken", "status", "stop_all", "summary", "up"]
