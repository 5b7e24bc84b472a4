"""``farebox dev cluster up|down|status``: a distributed farebox on one machine (see ``infra/cluster.py``).

The composition root's part: options to values, the environment handed to
the child processes, and exit codes: 0 done, 1 the cluster could not be
started (the message names the service or port; what was started is
stopped again) or ``down`` left something running, 2 bad options.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

DEFAULT_STATE = Path(__file__).resolve().parent.parent / "var" / "cluster"


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``dev cluster up|down|status`` to the ``farebox`` command line."""
    from infra.cluster_config import Ports

    dflt = Ports()
    dev = sub.add_parser("dev", help="developer tools").add_subparsers(dest="dev_command", required=True)
    cluster = dev.add_parser("cluster", help="a local distributed cluster").add_subparsers(
        dest="cluster_command", required=True)
    s = cluster.add_parser("up", help="start Kafka, Redis, PostgreSQL, simulator, worker, archiver, 2 pods")
    s.add_argument("--state-dir", default=str(DEFAULT_STATE), help="config, logs, data and pids (default var/cluster)")
    s.add_argument("--gateway-ports", default=",".join(map(str, dflt.gateways)), help="one port per pod")
    s.add_argument("--simulator-port", type=int, default=dflt.simulator)
    s.add_argument("--kafka-port", type=int, default=dflt.kafka)
    s.add_argument("--redis-port", type=int, default=dflt.redis)
    s.add_argument("--postgres-port", type=int, default=dflt.postgres)
    s.add_argument("--json", action="store_true", help="print the ports, config, pids and key as JSON")
    s.set_defaults(func=_up)
    for name, func, text in (("down", _down, "stop everything the cluster started"),
                             ("status", _status, "which of the cluster's processes run")):
        s = cluster.add_parser(name, help=text)
        s.add_argument("--state-dir", default=str(DEFAULT_STATE))
        s.set_defaults(func=func)


def _up(args: argparse.Namespace) -> int:
    from infra.cluster import ClusterError, up
    from infra.cluster_config import Ports, parse_ports, summary

    try:
        gateways = parse_ports(args.gateway_ports)
    except ValueError as exc:
        print(f"error: --gateway-ports: {exc}", file=sys.stderr)
        return 2
    ports = Ports(kafka=args.kafka_port, redis=args.redis_port, postgres=args.postgres_port,
                  simulator=args.simulator_port, gateways=gateways)

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        cluster, key = up(Path(args.state_dir), ports, _child_env(), say=say)
    except ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # a service's own error (Kafka, Redis, PostgreSQL could not start)
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"state_dir": str(cluster.state), "config": str(cluster.state / "farebox.yaml"),
                          "ports": ports.as_dict(), "key": key,
                          "processes": [{"name": p["name"], "pid": p["pid"]} for p in cluster.processes]}))
    else:
        print(summary(ports, cluster.state, key))
    return 0


def _child_env() -> dict[str, str]:
    """The environment for the cluster's processes: ours, without what would override the generated config
    (a control database or pod id meant for another farebox)."""
    return {k: v for k, v in os.environ.items() if k not in {"FAREBOX_CONTROL_DB", "FAREBOX_POD_ID"}}


def _down(args: argparse.Namespace) -> int:
    from infra.cluster import down

    return down(Path(args.state_dir))


def _status(args: argparse.Namespace) -> int:
    from infra.cluster import status

    cluster, running = status(Path(args.state_dir))
    if cluster is None:
        print(f"no cluster in {args.state_dir}")
        return 1
    live = {p["pid"] for p in running}
    for p in cluster.processes:
        print(f"{p['name']:<12} pid {p['pid']:<8} {'running' if p['pid'] in live else 'stopped'}")
    return 0 if len(running) == len(cluster.processes) else 1
