"""Local Kafka for a person trying distributed mode (tests use ``KafkaBroker`` directly).

    python -m infra.kafka fetch                  # Maven: cache Kafka's jars, print the folder
    python -m infra.kafka up [--port 9092] [--partitions 3] [--retention-ms MS] [--topic NAME[:PARTS[:compact]]]...
    python -m infra.kafka status                 # exit 0 when running and answering metadata
    python -m infra.kafka down                   # controlled shutdown
    python -m infra.kafka wipe                   # down, then delete the data
    python -m infra.kafka manifests [--format strimzi|kafka-topics] [--partitions 12] [--replication 3]
                                                 # the topics for a Kafka you run yourselves

``up`` keeps its data in ``var/kafka/`` (gitignored) and survives ``down``/``up``; the
broker runs detached and its pid, ports and folder are in ``var/kafka/broker.json``.
Without ``--topic`` it creates farebox's four topics (see ``topics.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

from infra.kafka.broker import KafkaBroker, KafkaBrokerError, _accepts, fetch_jars, wait_ready
from infra.kafka.topics import (
    WEEK_MS,
    TopicSpec,
    create_topics,
    farebox_topics,
    kafka_topics_commands,
    production_topics,
    strimzi_manifest,
)
from infra.process import free_port

VAR = Path(__file__).resolve().parents[2] / "var" / "kafka"
STATE = VAR / "broker.json"


def _state() -> dict | None:
    try:
        return json.loads(STATE.read_text())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _topic(text: str, partitions: int, retention_ms: int) -> TopicSpec:
    name, *rest = text.split(":")
    parts = int(rest[0]) if rest and rest[0] else partitions
    compacted = len(rest) > 1 and rest[1] == "compact"
    return TopicSpec(name, parts, -1 if compacted else retention_ms, compacted=compacted)


def up(args: argparse.Namespace) -> int:
    state = _state()
    if state and _alive(state["pid"]):
        print(f"already running: {state['bootstrap']} (pid {state['pid']})")
        return 0
    previous = state or {}
    port = args.port or previous.get("port") or (9092 if not _accepts("127.0.0.1:9092") else free_port())
    controller = previous.get("controller_port") or free_port()
    broker = KafkaBroker(port=port, controller_port=controller, data_dir=VAR)
    started = time.monotonic()
    broker.start(detach=True)
    specs = ([_topic(t, args.partitions, args.retention_ms) for t in args.topic] if args.topic
             else farebox_topics(args.partitions, args.retention_ms))
    created = asyncio.run(create_topics(broker.bootstrap, specs))
    STATE.write_text(json.dumps({"pid": broker.pid, "bootstrap": broker.bootstrap, "port": port,
                                 "controller_port": controller, "data_dir": str(VAR)}, indent=2))
    print(f"kafka ready at {broker.bootstrap} (pid {broker.pid}) in {time.monotonic() - started:.1f}s; "
          f"topics created: {', '.join(created) or 'none (all existed)'}; logs in {broker.log_path}")
    return 0


def down(_: argparse.Namespace) -> int:
    state = _state()
    if not state or not _alive(state["pid"]):
        print("not running")
        return 0
    os.kill(state["pid"], signal.SIGTERM)
    deadline = time.monotonic() + 30
    while _alive(state["pid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(state["pid"]):
        os.kill(state["pid"], signal.SIGKILL)
    print(f"stopped kafka (pid {state['pid']})")
    return 0


def status(_: argparse.Namespace) -> int:
    state = _state()
    if not state or not _alive(state["pid"]):
        print("not running")
        return 1
    try:
        asyncio.run(wait_ready(state["bootstrap"], timeout_s=5))
    except KafkaBrokerError as exc:
        print(f"pid {state['pid']} is alive but not answering: {exc}")
        return 1
    print(f"running at {state['bootstrap']} (pid {state['pid']}, data in {state['data_dir']})")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="infra/kafka/run.sh", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("fetch")
    p_up = sub.add_parser("up")
    p_up.add_argument("--port", type=int)
    p_up.add_argument("--partitions", type=int, default=3)
    p_up.add_argument("--retention-ms", type=int, default=WEEK_MS)
    p_up.add_argument("--topic", action="append", default=[], help="NAME[:PARTITIONS[:compact]], repeatable")
    sub.add_parser("down")
    sub.add_parser("status")
    sub.add_parser("wipe")
    p_man = sub.add_parser("manifests", help="print the topics for a production cluster")
    p_man.add_argument("--format", choices=("strimzi", "kafka-topics"), default="strimzi")
    p_man.add_argument("--partitions", type=int, default=12)
    p_man.add_argument("--replication", type=int, default=3)
    p_man.add_argument("--min-insync", type=int, default=2)
    p_man.add_argument("--retention-ms", type=int, default=WEEK_MS)
    p_man.add_argument("--cluster", default="farebox", help="Strimzi: the Kafka resource's name")
    p_man.add_argument("--namespace")
    p_man.add_argument("--bootstrap", default="BROKER:9092", help="kafka-topics: --bootstrap-server")
    args = parser.parse_args(argv)
    if args.command == "manifests":
        specs = production_topics(args.partitions, args.replication, args.min_insync, args.retention_ms)
        print(strimzi_manifest(specs, args.cluster, args.namespace) if args.format == "strimzi"
              else kafka_topics_commands(specs, args.bootstrap), end="")
        return 0
    VAR.mkdir(parents=True, exist_ok=True)
    if args.command == "fetch":
        started = time.monotonic()
        print(f"{fetch_jars(quiet=False)} ({time.monotonic() - started:.1f}s)")
        return 0
    if args.command == "wipe":
        down(args)
        shutil.rmtree(VAR, ignore_errors=True)
        return 0
    return {"up": up, "down": down, "status": status}[args.command](args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
