"""What a local distributed cluster is made of: its ports, its folders, and the farebox config it runs on.

Pure: ``plan_ports`` and ``cluster_config`` take values and return values; the
processes are started by ``infra.cluster``. The config is
``examples/farebox.yaml`` turned distributed: Kafka bootstrap, Redis, the
control database on the cluster's PostgreSQL, the deployments pointed at the
cluster's simulator, and every folder (spool, worker tables, archive) inside
the cluster's state folder.
"""

from __future__ import annotations

import re
from copy import deepcopy
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
WORKER_ID = "farebox-dev-worker"
PARTITIONS = 3
DEV_TEAM, DEV_APP, DEV_ALIASES = "platform", "playground", "chat-default,embed-default"


@dataclass(frozen=True)
class Ports:
    """Every port the cluster listens on (127.0.0.1); ``gateways`` has one per pod."""

    kafka: int = 9092
    redis: int = 6380  # not 6379: Debian's redis-server package starts a system Redis there
    postgres: int = 5433  # not 5432, for the same reason
    simulator: int = 9090
    gateways: tuple[int, ...] = (8081, 8082)

    def named(self) -> list[tuple[str, int]]:
        """(service, port) in start order; names are what an error message says."""
        return [("kafka", self.kafka), ("redis", self.redis), ("postgres", self.postgres),
                ("simulator", self.simulator), *((f"gateway pod-{i}", p) for i, p in enumerate(self.gateways))]

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "gateways": list(self.gateways)}


def parse_ports(text: str) -> tuple[int, ...]:
    """``8081,8082`` -> (8081, 8082); ValueError naming the bad entry."""
    ports = []
    for part in text.split(","):
        if not part.strip().isdigit() or not 0 < int(part) < 65536:
            raise ValueError(f"not a port: {part!r}")
        ports.append(int(part))
    if len(set(ports)) != len(ports):
        raise ValueError(f"the same port twice: {text}")
    return tuple(ports)


def duplicate_ports(ports: Ports) -> list[str]:
    """Services given the same port (``['simulator and gateway pod-0: 9090']``)."""
    seen: dict[int, str] = {}
    clashes = []
    for name, port in ports.named():
        if port in seen:
            clashes.append(f"{seen[port]} and {name}: {port}")
        seen.setdefault(port, name)
    return clashes


def postgres_url(port: int, database: str = "farebox") -> str:
    return f"postgresql+psycopg://postgres@127.0.0.1:{port}/{database}"


def owner_only_secrets(folder: Path) -> Path:
    """A copy of the simulator's provider keys only its owner can read (farebox warns about any other mode)."""
    path = folder / "secrets.env"
    path.write_text((EXAMPLES / "secrets.env").read_text())
    path.chmod(0o600)
    return path


def cluster_config(example: dict[str, Any], ports: Ports, state: Path) -> dict[str, Any]:
    """``examples/farebox.yaml`` (parsed) made into the cluster's distributed config; paths absolute."""
    tree = deepcopy(example)
    tree["server"]["port"] = ports.gateways[0]
    tree["server"].pop("pod_id", None)  # each pod gets FAREBOX_POD_ID
    tree["event_log"]["path"] = str(state / "events.sqlite")
    tree["state_dir"] = str(state)
    tree["secrets_file"] = str(state / "secrets.env")  # ``owner_only_secrets`` writes it
    tree["control_db"] = {**(tree.get("control_db") or {}), "url": postgres_url(ports.postgres)}
    for dep in tree["deployments"]:
        dep["base_url"] = re.sub(r"//(127\.0\.0\.1|localhost):\d+", f"//127.0.0.1:{ports.simulator}",
                                 dep["base_url"])
    tree["mode"] = "distributed"
    tree["distributed"] = {
        **(tree.get("distributed") or {}),
        "bootstrap": f"127.0.0.1:{ports.kafka}",
        "redis_url": f"redis://127.0.0.1:{ports.redis}/0",
        "partitions": PARTITIONS,
        "pods": len(ports.gateways),
        "spool_dir": str(state / "spool"),
        "worker_id": WORKER_ID,
        "worker_data_dir": str(state / "worker"),
    }
    return tree


def summary(ports: Ports, state: Path, key: str) -> str:
    """What ``up`` prints: where everything is, the dev key, and how to try it."""
    pods = "\n".join(f"  gateway pod-{i}:  http://127.0.0.1:{p}/v1   (log: {state}/pod-{i}.log)"
                     for i, p in enumerate(ports.gateways))
    first = ports.gateways[0]
    return f"""
farebox dev cluster is up (state, logs and pids in {state})
{pods}
  simulator:      http://127.0.0.1:{ports.simulator}   (log: {state}/simulator.log)
  kafka:          127.0.0.1:{ports.kafka}   (data: {state}/kafka)
  redis:          redis://127.0.0.1:{ports.redis}/0
  postgres:       {postgres_url(ports.postgres)}   (the config database)
  worker:         log {state}/worker.log
  archiver:       log {state}/archiver.log, Parquet in {state}/archive
  config:         {state}/farebox.yaml

Your dev key (team {DEV_TEAM}, app {DEV_APP}; shown once, only its hash is stored):

    export FAREBOX_KEY={key}

Try:  curl -s http://127.0.0.1:{first}/v1/chat/completions -H "Authorization: Bearer $FAREBOX_KEY" \\
        -H 'content-type: application/json' -d '{{"model":"chat-default","messages":[{{"role":"user","content":"Hello"}}]}}'
Stop: farebox dev cluster down --state-dir {state}
"""
