"""The ``farebox`` command line.

    farebox serve --config PATH [--host H] [--port N] [--workers N]
    farebox simulator [--port N] [--host H] [--config PATH]
    farebox keys|budgets|aliases|prices|teams|business-units|admin|audit|config|db: see farebox/cli_control.py
    farebox events tail --config PATH [-n N] [--follow]
    farebox archiver | archive flush|verify|compact | replay: see farebox/cli_archive.py
    farebox finance sql|shell, farebox report showback: see farebox/cli_finance.py
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from farebox.cli_archive import register as register_archive_commands
from farebox.cli_control import register as register_control_commands
from proxy.control.problems import ConfigError
from proxy.errors import GatewayError


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
    __import__("farebox.drift_warning", fromlist=["warn_if_drifted"]).warn_if_drifted(settings)  # once, at start
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


def _events_tail(args: argparse.Namespace) -> int:
    from farebox.settings import load_settings
    from streams.sqlite_log import SqliteEventLog
    from streams.tail import follow, format_event

    settings = load_settings(args.config)

    async def main() -> None:
        log = SqliteEventLog.open(settings.event_log_path, readonly=True)
        try:
            start = max(log.last_offset - args.n, 0)
            if args.follow:
                async for offset, event in follow(log, start, 0.5):
                    print(format_event(offset, event), flush=True)
            else:
                for offset, event in await log.read(after=start, limit=args.n):
                    print(format_event(offset, event))
        finally:
            await log.close()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="farebox", description="OpenAI-compatible LLM gateway with exact metering.")
    sub = p.add_subparsers(dest="command", required=True)

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

    register_archive_commands(sub)  # archiver, archive flush|verify|compact, replay

    s = sub.add_parser("simulator", help="run the provider simulator (OpenAI and Anthropic dialects)")
    s.add_argument("--config")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=9090)
    s.set_defaults(func=_simulator)

    register_control_commands(sub)  # keys, budgets, aliases, prices, teams, admin, audit, db, config
    events = sub.add_parser("events", help="the event log").add_subparsers(dest="events_command", required=True)
    s = events.add_parser("tail", help="show recent events readably")
    s.add_argument("--config", required=True)
    s.add_argument("-n", type=int, default=20)
    s.add_argument("--follow", "-f", action="store_true")
    s.set_defaults(func=_events_tail)
    __import__("farebox.cli_export", fromlist=["register"]).register(sub)  # farebox export focus
    __import__("farebox.cli_whatif", fromlist=["register"]).register(sub)  # farebox whatif
    __import__("farebox.cli_reconcile", fromlist=["register"]).register(sub)  # farebox reconcile
    __import__("farebox.cli_dev", fromlist=["register"]).register(sub)  # farebox dev cluster up|down|status
    __import__("farebox.cli_finance", fromlist=["register"]).register(sub)  # farebox finance sql|shell, report showback
    __import__("farebox.cli_rerate", fromlist=["register"]).register(sub)  # farebox rerate
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except GatewayError as exc:  # ConfigRejected, ControlUnavailable, not found...
        print(f"error: {exc.message}", file=sys.stderr)
        for p in getattr(exc, "problems", []):
            print(f"  - {p}", file=sys.stderr)
        return 2 if exc.status < 500 else 3


if __name__ == "__main__":
    sys.exit(main())
