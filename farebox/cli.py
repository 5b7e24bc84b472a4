"""The ``farebox`` command line.

    farebox serve --config PATH [--host H] [--port N]
    farebox simulator [--port N] [--host H] [--config PATH]
    farebox keys create --config PATH --team T --app A --aliases a,b [--rpm N] [--input-tpm N] [--output-tpm N] [--json]
    farebox admin token create --config PATH --name N --role admin|finance|auditor [--json]
    farebox config check PATH
    farebox events tail --config PATH [-n N] [--follow]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import datetime, timezone

from proxy.control.problems import ConfigError


def _serve(args: argparse.Namespace) -> int:
    from farebox.settings import load_secrets, load_settings
    from farebox.wiring import serve

    settings = load_settings(args.config).with_listen(args.host, args.port)
    serve(settings, load_secrets(settings))
    return 0


def _simulator(args: argparse.Namespace) -> int:
    from infra.simulator.app import run
    from infra.simulator.config import load_config

    run(load_config(args.config), host=args.host, port=args.port)
    return 0


def _keys_create(args: argparse.Namespace) -> int:
    from farebox.settings import load_settings
    from proxy.control.keys import mint_key
    from proxy.control.statefile import append_jsonl

    settings = load_settings(args.config)
    snap = settings.snapshot
    aliases = [a.strip() for a in args.aliases.split(",") if a.strip()]
    problems = []
    if args.team not in snap.teams:
        problems.append(f"--team: unknown team {args.team!r} (known: {', '.join(sorted(snap.teams))})")
    problems += [f"--aliases: unknown alias {a!r}" for a in aliases if a not in snap.aliases]
    if not aliases:
        problems.append("--aliases: give at least one alias")
    if problems:
        raise ConfigError(problems, "farebox keys create")
    minted = mint_key(
        team=args.team,
        app=args.app,
        aliases=aliases,
        env=args.env,
        data_class_ceiling=args.data_class_ceiling,
        now_iso=datetime.now(timezone.utc).isoformat(),
        limits={"rpm": args.rpm, "input_tpm": args.input_tpm, "output_tpm": args.output_tpm},
    )
    append_jsonl(settings.keys_file, minted.record)
    if args.json:
        print(json.dumps({"key": minted.plaintext, "id": minted.record["id"], "team": args.team,
                          "app": args.app, "aliases": aliases}))
    else:
        print(f"key {minted.record['id']} for {args.team}/{args.app} ({', '.join(aliases)}); shown once:")
        print(minted.plaintext)
    return 0


def _admin_token_create(args: argparse.Namespace) -> int:
    from farebox.settings import load_settings
    from proxy.control.keys import mint_admin_token
    from proxy.control.statefile import append_jsonl

    settings = load_settings(args.config)
    minted = mint_admin_token(name=args.name, role=args.role, now_iso=datetime.now(timezone.utc).isoformat())
    append_jsonl(settings.admin_tokens_file, minted.record)
    if args.json:
        print(json.dumps({"token": minted.plaintext, "name": args.name, "role": args.role}))
    else:
        print(f"admin token '{args.name}' ({args.role}); shown once:")
        print(minted.plaintext)
    return 0


def _config_check(args: argparse.Namespace) -> int:
    from farebox.settings import load_settings

    settings = load_settings(args.path)
    snap = settings.snapshot
    print(
        f"{args.path}: ok — {len(snap.teams)} teams, {len(snap.deployments)} deployments, "
        f"{len(snap.aliases)} aliases, {len(snap.keys)} keys, snapshot hash {snap.content_hash[:12]}"
    )
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
    s.set_defaults(func=_serve)

    s = sub.add_parser("simulator", help="run the provider simulator (OpenAI and Anthropic dialects)")
    s.add_argument("--config")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=9090)
    s.set_defaults(func=_simulator)

    keys = sub.add_parser("keys", help="virtual keys").add_subparsers(dest="keys_command", required=True)
    s = keys.add_parser("create", help="mint a key; it is printed once and only its hash is stored")
    s.add_argument("--config", required=True)
    s.add_argument("--team", required=True)
    s.add_argument("--app", required=True)
    s.add_argument("--aliases", required=True, help="comma-separated aliases the key may use")
    s.add_argument("--env", default="dev", choices=["dev", "prod"])
    s.add_argument("--data-class-ceiling", default="internal",
                   choices=["public", "internal", "confidential", "restricted"])
    s.add_argument("--rpm", type=int, help="requests per minute (default: rate_limits.key_defaults)")
    s.add_argument("--input-tpm", type=int, help="input tokens per minute")
    s.add_argument("--output-tpm", type=int, help="output tokens per minute")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_keys_create)

    admin = sub.add_parser("admin", help="admin API access").add_subparsers(dest="admin_command", required=True)
    tokens = admin.add_parser("token", help="admin tokens").add_subparsers(dest="token_command", required=True)
    s = tokens.add_parser("create", help="mint an admin token; printed once, only its hash is stored")
    s.add_argument("--config", required=True)
    s.add_argument("--name", required=True)
    s.add_argument("--role", required=True, choices=["admin", "finance", "auditor"])
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_admin_token_create)

    config = sub.add_parser("config", help="configuration").add_subparsers(dest="config_command", required=True)
    s = config.add_parser("check", help="validate a config file without starting anything")
    s.add_argument("path")
    s.set_defaults(func=_config_check)

    events = sub.add_parser("events", help="the event log").add_subparsers(dest="events_command", required=True)
    s = events.add_parser("tail", help="show recent events readably")
    s.add_argument("--config", required=True)
    s.add_argument("-n", type=int, default=20)
    s.add_argument("--follow", "-f", action="store_true")
    s.set_defaults(func=_events_tail)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
