"""A distributed farebox on one machine, as real processes: simulator, Faust worker, N gateway pods.

Kafka (the Maven-jar broker) and Redis are passed in (session fixtures);
each cluster gets its own topic prefix, worker id and folders, so clusters do
not see each other's events. Redis keys are not prefixed per cluster
(``fb:scope:team:alpha``): give clusters that run side by side their own Redis.

Fault tests use the process handles: ``kill_pod`` / ``start_pod`` (SIGKILL,
then the same pod id, port and spool folder), ``kill_worker`` /
``start_worker`` (the same worker id and data dir); ``server`` overrides
settings such as ``hold_ttl_s``, ``lease`` the ``distributed`` section
(``lease_ttl_s``, ``lease_expiry_grace_s``, ...).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
import time
import uuid
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import yaml

from infra.kafka.topics import create_topics, farebox_topics
from streams.watchdog import EXIT_STALLED
from tests.harness import free_port, mint, sim_config, spawn, stop, test_config, wait_http

TEAMS = ("alpha", "beta", "gamma")
# Faust reads these from the environment. A worker killed with SIGKILL stays in its consumer group
# until its session times out, and a restarted worker with the same id gets no partitions before
# that: Faust's default (60 s) would make each restart in a test wait a minute.
WORKER_ENV = {"BROKER_SESSION_TIMEOUT": "10", "BROKER_HEARTBEAT_INTERVAL": "1"}
# FB_TEST_WORKER_LOGLEVEL=info keeps Faust's rebalance and recovery story in each cluster's worker.log
WORKER_LOGLEVEL = os.environ.get("FB_TEST_WORKER_LOGLEVEL", "warning")


@dataclass
class Cluster:
    folder: Path
    config: Path
    bootstrap: str
    redis_url: str
    prefix: str
    sim_url: str
    keys: dict[str, str]  # team -> virtual key
    pods: list[subprocess.Popen]
    pod_urls: list[str]
    worker: subprocess.Popen
    simulator: subprocess.Popen
    pod_ports: list[int] = field(default_factory=list)

    @property
    def requests_topic(self) -> str:
        return f"{self.prefix}requests"

    def pod_id(self, i: int) -> str:
        return f"pod-{i}"

    def spool_path(self, i: int) -> Path:
        """The disk spool file of pod ``i`` (``distributed.spool_dir/<pod id>``)."""
        return self.folder / "spool" / self.pod_id(i)

    def start_worker(self) -> None:
        self.worker = spawn(["farebox", "worker", "--config", str(self.config), "--loglevel", WORKER_LOGLEVEL],
                            self.folder / "worker.log", env=WORKER_ENV)

    def spawn_worker(self, name: str) -> subprocess.Popen:
        """Another worker in the same consumer group (its own data dir, config copy and log ``<name>.log``):
        the group shares the partitions, and they move when it joins or leaves."""
        tree = yaml.safe_load(self.config.read_text())
        tree["distributed"]["worker_data_dir"] = str(self.folder / name)
        config = self.folder / f"{name}.yaml"
        config.write_text(yaml.safe_dump(tree, sort_keys=False))
        return spawn(["farebox", "worker", "--config", str(config), "--loglevel", WORKER_LOGLEVEL],
                     self.folder / f"{name}.log", env=WORKER_ENV)

    def kill_worker(self) -> None:
        """SIGKILL: no commit, no flush, no goodbye."""
        _kill(self.worker)

    def kill_pod(self, i: int) -> None:
        """SIGKILL pod ``i``: open streams are cut, what its producer had not sent is gone."""
        _kill(self.pods[i])

    def ensure_pods(self) -> None:
        """Start again (same id and port) every pod that is not running."""
        for i, proc in enumerate(self.pods):
            if proc is None or proc.poll() is not None:
                self.start_pod(i)

    def start_pod(self, i: int) -> None:
        self.pods[i] = spawn(["farebox", "serve", "--config", str(self.config), "--port", str(self.pod_ports[i])],
                             self.folder / f"pod-{i}.log", env={"FAREBOX_POD_ID": self.pod_id(i)})
        wait_http(self.pod_urls[i] + "/health", self.pods[i], self.folder / f"pod-{i}.log", timeout=30)


class Supervisor:
    """Plays the workers' supervisor (systemd, Kubernetes): a worker that ended itself because its table
    recovery stalled (``streams.watchdog.EXIT_STALLED``) is started again under the same name, as often as it
    takes. ``start(name)`` / ``stop(name)`` run workers named like ``Cluster.spawn_worker``'s; ``restarts``
    counts the restarts, per name."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.procs: dict[str, subprocess.Popen] = {}
        self.restarts: Counter = Counter()
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def adopt(self, name: str, proc: subprocess.Popen) -> None:
        """Supervise a running worker (``"worker"``: the cluster's own, whose config and log spawn_worker's
        equal)."""
        with self._lock:
            self.procs[name] = proc

    def start(self, name: str) -> subprocess.Popen:
        with self._lock:
            proc = self.procs[name] = self.cluster.spawn_worker(name)
            return proc

    def stop(self, name: str, timeout: float = 30) -> None:
        with self._lock:
            proc = self.procs.pop(name)
        stop(proc, timeout=timeout)

    def close(self) -> None:
        self._done.set()
        self._thread.join()
        for name in list(self.procs):
            self.stop(name, timeout=20)

    def _watch(self) -> None:
        while not self._done.wait(0.5):
            with self._lock:
                for name, proc in list(self.procs.items()):
                    if proc.poll() == EXIT_STALLED:
                        self.restarts[name] += 1
                        self.procs[name] = self.cluster.spawn_worker(name)


def _kill(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()


def _mutate(bootstrap: str, redis_url: str, prefix: str, folder: Path, limits: dict[str, str], lease: dict,
            server: dict | None = None, sections: dict | None = None):
    def mutate(tree: dict) -> None:
        tree.update(sections or {})
        tree["server"].pop("pod_id", None)
        tree["server"].update(server or {})
        tree["server"]["max_in_flight"] = 0
        tree["mode"] = "distributed"
        tree["distributed"] = {
            "bootstrap": bootstrap, "redis_url": redis_url, "requests_topic": f"{prefix}requests",
            "scope_topic": f"{prefix}scope-entries", "rollups_topic": f"{prefix}rollups",
            "config_topic": f"{prefix}config", "dead_letter_topic": f"{prefix}dead-letter", "partitions": 3, "pods": 3, "spool_dir": str(folder / "spool"),
            "worker_id": f"{prefix}worker", "worker_data_dir": str(folder / "worker"), **lease,
        }
        tree["teams"] += [{"name": t, "business_unit": "retail"} for t in TEAMS]
        tree["apps"] += [{"name": f"app-{t}", "team": t} for t in TEAMS]
        tree["budgets"]["scopes"] = [{"scope": f"team:{t}", "monthly_limit": limits[t], "soft_pct": 80}
                                     for t in TEAMS]
        tree["budgets"]["per_request_cap"] = "50.00"
        tree["rate_limits"]["key_defaults"] = {"rpm": 100000, "input_tpm": 100000000, "output_tpm": 100000000}
        tree["rate_limits"].pop("team_tpm", None)
    return mutate


@contextmanager
def running_cluster(folder: Path, bootstrap: str, redis_url: str, *, pods: int = 3,
                    limits: dict[str, str] | None = None, lease: dict | None = None,
                    sim_defaults: dict | None = None, server: dict | None = None,
                    sections: dict | None = None, mutate: Callable[[dict], None] | None = None,
                    sim_mutate: Callable[[dict], None] | None = None) -> Iterator[Cluster]:
    folder.mkdir(parents=True, exist_ok=True)
    prefix = f"t{uuid.uuid4().hex[:8]}."
    asyncio.run(create_topics(bootstrap, farebox_topics(3, prefix=prefix)))
    sim_port = free_port()
    ports = [free_port() for _ in range(pods)]
    limits = limits or dict.fromkeys(TEAMS, "100000.00")
    base = _mutate(bootstrap, redis_url, prefix, folder, limits, lease or {}, server or {}, sections)

    def edit(tree: dict) -> None:
        base(tree)
        if mutate is not None:
            mutate(tree)
    config = test_config(folder, sim_port, ports[0], edit)
    sim = spawn(["farebox", "simulator", "--config", str(sim_config(folder, sim_mutate, **(sim_defaults or {}))),
                 "--port", str(sim_port)], folder / "simulator.log")
    cluster = Cluster(folder, config, bootstrap, redis_url, prefix, f"http://127.0.0.1:{sim_port}", {},
                      [None] * pods, [f"http://127.0.0.1:{p}" for p in ports], None, sim, ports)  # type: ignore[list-item,arg-type]
    try:
        wait_http(f"{cluster.sim_url}/_sim/health", sim, folder / "simulator.log")
        cluster.keys = {t: mint(config, t, f"app-{t}", "chat-default,chat-openai") for t in TEAMS}
        cluster.start_worker()
        for i in range(pods):
            cluster.start_pod(i)
        yield cluster
    finally:
        for proc in cluster.pods:
            if proc is not None:
                stop(proc, timeout=40)
        if cluster.worker is not None:
            stop(cluster.worker, timeout=20)
        stop(sim)


def wait_until(check, timeout: float, interval: float = 0.25, what: str = "condition"):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what} not reached in {timeout}s (last: {last!r})")


def env_without_proxy() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
