"""``farebox serve``, ``farebox worker`` and ``farebox simulator``: the long-running processes.

Each command parses its options, loads the settings once and hands them to the composition root
(``farebox.wiring``, ``farebox.workers``, ``farebox.worker``); nothing heavy is imported until the command runs.
"""

from __future__ import annotations

import argparse
import os
import sys


def _serve(args: argparse.Namespace) -> int:
    from dataclasses import replace
    from pathlib import Path

    from farebox.settings import load_settings
    from farebox.wiring import serve

    settings = load_settings(args.config).with_listen(args.host, args.port)
    if args.gateway_of:  # one of `serve --workers N`'s gateway processes, started by the owner
        from farebox.local_pod import die_with_owner

        die_with_owner(os.getppid())
        serve(replace(settings, pod_id=args.pod_id or settings.pod_id), gateway_of=Path(args.gateway_of),
              processes=args.processes)
        return 0
    if args.workers < 1:
        print(f"error: --workers must be at least 1, got {args.workers}", file=sys.stderr)
        return 2
    if args.workers > 1 and settings.mode != "embedded":
        print("error: --workers is for embedded mode; in distributed mode run more pods instead", file=sys.stderr)
        return 2
    from farebox.drift_warning import warn_if_drifted

    warn_if_drifted(settings)  # once, at start
    if args.workers > 1:
        from farebox.workers import serve_workers

        serve_workers(settings, args.workers)
        return 0
    serve(settings)
    return 0


def _worker(args: argparse.Namespace) -> int:
    from farebox.settings import load_settings
    from farebox.worker import run_worker

    run_worker(load_settings(args.config), loglevel=args.loglevel)
    return 0


def _simulator(args: argparse.Namespace) -> int:
    from infra.simulator.app import run
    from infra.simulator.config import load_config

    run(load_config(args.config), host=args.host, port=args.port)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("serve", help="run the gateway (embedded mode)")
    s.add_argument("--config", required=True)
    s.add_argument("--host")
    s.add_argument("--port", type=int)
    s.add_argument("--workers", type=int, default=1,
                   help="gateway processes sharing the port (embedded mode; budgets stay exact across them)")
    s.add_argument("--gateway-of", help=argparse.SUPPRESS)  # the owner's socket (set by --workers)
    s.add_argument("--processes", type=int, default=1, help=argparse.SUPPRESS)
    s.add_argument("--pod-id", help=argparse.SUPPRESS)
    s.set_defaults(func=_serve)

    s = sub.add_parser("worker", help="run a Faust worker (distributed mode): ledger, leases, rollups, projections")
    s.add_argument("--config", required=True)
    s.add_argument("--loglevel", default="warning")
    s.set_defaults(func=_worker)

    s = sub.add_parser("simulator", help="run the provider simulator (OpenAI and Anthropic dialects)")
    s.add_argument("--config")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=9090)
    s.set_defaults(func=_simulator)
