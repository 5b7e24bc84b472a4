"""The control-plane commands of the ``farebox`` CLI: keys, budgets, aliases, prices, teams, business units,
admin tokens, the audit log, config check/apply and database migrations.

Every command opens the config database through ``farebox.control`` (the composition root), makes one
change through the control service (audited, then published as a new snapshot) and prints the result.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from proxy.control.problems import ConfigError


def _control(path: str):  # type: ignore[no-untyped-def]
    """The control service on the config database named by the file (migrated and seeded on first use)."""
    from farebox.control import open_config_db
    from farebox.settings import load_settings
    from proxy.control.service import ControlService

    settings = load_settings(path)
    adopt = None
    if settings.mode == "distributed":  # pods follow fb.config: publish each commit there before exiting
        from farebox.config_topic import publish_now

        async def adopt(version: int, document: dict) -> None:
            if not await publish_now(settings, version, document):
                print(f"note: snapshot {version} is committed but Kafka did not take it; pods will read it "
                      f"from the config database within {settings.distributed.config_db_poll_s:g} s", file=sys.stderr)

    return ControlService(open_config_db(settings), price_change_factor=settings.price_change_factor, adopt=adopt)


def _actor() -> str:
    """Who the audit log names for a CLI change: the config host's user, marked as the break-glass path (the
    CLI needs no second person; the admin API's two-person changes are ``proxy.control.approvals``)."""
    import getpass

    try:
        return f"cli:{getpass.getuser()} (break-glass)"
    except Exception:  # noqa: BLE001 - no user name in some containers
        return "cli (break-glass)"


def _run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def _csv(raw: str) -> list[str]:
    return [v.strip() for v in raw.split(",") if v.strip()]


def _keys_create(args: argparse.Namespace) -> int:
    svc = _control(args.config)
    aliases = [a.strip() for a in args.aliases.split(",") if a.strip()]
    body = {"team": args.team, "app": args.app, "aliases": aliases, "env": args.env,
            "data_class_ceiling": args.data_class_ceiling, "rpm": args.rpm, "input_tpm": args.input_tpm,
            "output_tpm": args.output_tpm, "expires_at": args.expires_at}
    if args.default_data_class:
        body["default_data_class"] = args.default_data_class
    for name in ("regions", "deployments"):
        if getattr(args, name) is not None:
            body[name] = _csv(getattr(args, name))
    view, plaintext = _run(svc.create_key(_actor(), {k: v for k, v in body.items() if v is not None}))
    if args.json:
        print(json.dumps({"key": plaintext, "id": view["id"], "team": args.team, "app": args.app, "aliases": aliases,
                          "env": args.env, "regions": view["regions"], "deployments": view["deployments"]}))
    else:
        print(f"key {view['id']} for {args.team}/{args.app} ({', '.join(aliases)}, {args.env}){_pins(view)}; shown once:")
        print(plaintext)
    return 0


def _pins(view: dict) -> str:
    """A pinned key's restrictions for display, e.g. ' in ap-south-1 only, deployments a,b'; '' if none."""
    out = ""
    if view.get("regions"):
        out += f" in {','.join(view['regions'])} only"
    if view.get("deployments"):
        out += f"{',' if out else ''} deployments {','.join(view['deployments'])}"
    return out


def _keys_list(args: argparse.Namespace) -> int:
    rows = _run(_control(args.config).list_keys())
    if args.json:
        print(json.dumps(rows))
        return 0
    for k in rows:
        state = "revoked" if k["revoked"] else (f"expires {k['expires_at']}" if k["expires_at"] else "active")
        print(f"{k['id']:<20} {k['env']:<5} {k['team']}/{k['app']:<24} {','.join(k['aliases']):<40} {state}{_pins(k)}")
    return 0


def _keys_revoke(args: argparse.Namespace) -> int:
    view = _run(_control(args.config).revoke_key(_actor(), args.key_id))
    print(f"key {view['id']} revoked; live on every pod at its next poll")
    return 0


def _keys_rotate(args: argparse.Namespace) -> int:
    from proxy.control.changes import rotate_spec

    pins = rotate_spec({name: _csv(getattr(args, name)) for name in ("regions", "deployments")
                        if getattr(args, name) is not None})
    after, plaintext = _run(_control(args.config).rotate_key(_actor(), args.key_id, args.overlap_s, pins))
    if args.json:
        print(json.dumps({"key": plaintext, "id": after["new"]["id"], "old_expires_at": after["old"]["expires_at"]}))
    else:
        print(f"key {after['new']['id']} replaces {args.key_id} (valid until {after['old']['expires_at']}); shown once:")
        print(plaintext)
    return 0


def _budgets_set(args: argparse.Namespace) -> int:
    body = {"monthly_limit": args.monthly_limit, "soft_pct": args.soft_pct, "env": args.env,
            "downgrade_alias": args.downgrade_alias, "max_calls": args.max_calls,
            "spend_per_hour": args.spend_per_hour}
    view = _run(_control(args.config).set_budget(_actor(), args.scope, {k: v for k, v in body.items() if v is not None}))
    print(json.dumps(view))
    return 0


def _spec(raw: str) -> dict:
    import yaml

    text = open(raw[1:], encoding="utf-8").read() if raw.startswith("@") else raw
    tree = yaml.safe_load(text)
    if not isinstance(tree, dict):
        raise ConfigError(["--spec must be a JSON/YAML mapping (or @file)"], "farebox")
    return tree


def _aliases_set(args: argparse.Namespace) -> int:
    print(json.dumps(_run(_control(args.config).put_alias(_actor(), args.name, _spec(args.spec)))))
    return 0


def _prices_add(args: argparse.Namespace) -> int:
    body = {"prices": _spec(args.spec), "allow_large_change": args.allow_large_change}
    if args.valid_from:
        body["valid_from"] = args.valid_from
    print(json.dumps(_run(_control(args.config).add_prices(_actor(), body, args.version))))
    return 0


def _prices_list(args: argparse.Namespace) -> int:
    print(json.dumps(_run(_control(args.config).list_prices()), indent=2))
    return 0


def _teams_set(args: argparse.Namespace) -> int:
    body = {name: value for name, value in (("business_unit", args.business_unit), ("cost_centre", args.cost_centre))
            if value is not None}
    if args.body_log is not None:
        body["body_log"] = args.body_log == "on"
    print(json.dumps(_run(_control(args.config).put_team(_actor(), args.name, body))))
    return 0


def _apps_set(args: argparse.Namespace) -> int:
    body = {"cost_centre": args.cost_centre} if args.cost_centre is not None else {}
    print(json.dumps(_run(_control(args.config).put_app(_actor(), args.team, args.name, body))))
    return 0


def _bus_set(args: argparse.Namespace) -> int:
    print(json.dumps(_run(_control(args.config).put_business_unit(_actor(), args.name))))
    return 0


def _admin_token_create(args: argparse.Namespace) -> int:
    view, plaintext = _run(_control(args.config).create_admin_token(_actor(), args.name, args.role))
    if args.json:
        print(json.dumps({"token": plaintext, "name": args.name, "role": args.role}))
    else:
        print(f"admin token '{args.name}' ({args.role}); shown once:")
        print(plaintext)
    return 0


def _admin_token_revoke(args: argparse.Namespace) -> int:
    _run(_control(args.config).revoke_admin_token(_actor(), args.name))
    print(f"admin token '{args.name}' revoked")
    return 0


def _audit(args: argparse.Namespace) -> int:
    for row in reversed(_run(_control(args.config).audit(args.n))):
        print(json.dumps(row) if args.json else
              f"{row['at']}  {row['actor']:<20} {row['action']:<22} {row['object']:<30} {row['outcome']}")
    return 0


def _config_apply(args: argparse.Namespace) -> int:
    from farebox.settings import load_settings

    settings = load_settings(args.path)
    svc = _control(args.path)
    diff, done = _run(svc.apply(_actor(), settings.control_tree, args.allow_large_price_change))
    for line in diff:
        print(line)
    if done.changed:
        print(f"applied {len(diff)} change(s): snapshot {done.version}")
    else:
        print(f"no changes: snapshot {done.version} stays live")
    return 0


def _db(args: argparse.Namespace) -> int:
    from farebox.settings import load_settings
    from proxy.control.db import migrate
    from proxy.control.db.engine import make_engine

    settings = load_settings(args.config)
    engine = make_engine(settings.control_db_url)
    try:
        if args.db_command == "upgrade":
            migrate.upgrade(engine, args.revision or "head")
        elif args.db_command == "downgrade":
            migrate.downgrade(engine, args.revision or "base")
        print(f"{settings.safe_db_url}: revision {migrate.current(engine) or 'base (empty)'}")
    finally:
        engine.dispose()
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


def register(sub: argparse._SubParsersAction) -> None:
    """Add the control-plane subcommands to the ``farebox`` parser."""
    keys = sub.add_parser("keys", help="virtual keys").add_subparsers(dest="keys_command", required=True)
    s = keys.add_parser("create", help="mint a key; it is printed once and only its hash is stored")
    s.add_argument("--config", required=True)
    s.add_argument("--team", required=True)
    s.add_argument("--app", required=True)
    s.add_argument("--aliases", required=True, help="comma-separated aliases the key may use")
    s.add_argument("--env", default="dev", choices=["dev", "prod"])
    s.add_argument("--data-class-ceiling", default="internal",
                   choices=["public", "internal", "confidential", "restricted"])
    s.add_argument("--default-data-class", choices=["public", "internal", "confidential", "restricted"])
    s.add_argument("--rpm", type=int, help="requests per minute (default: rate_limits.key_defaults)")
    s.add_argument("--input-tpm", type=int, help="input tokens per minute")
    s.add_argument("--output-tpm", type=int, help="output tokens per minute")
    s.add_argument("--expires-at", help="ISO-8601 time with a zone")
    s.add_argument("--regions", help="comma-separated regions the key's requests may be served in "
                                     "(residency pin: refused rather than sent elsewhere; default: any)")
    s.add_argument("--deployments", help="comma-separated deployment ids the key may use "
                                         "(default: any of its aliases' deployments)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_keys_create)
    s = keys.add_parser("list", help="keys (display ids and policy, never the keys)")
    s.add_argument("--config", required=True)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_keys_list)
    s = keys.add_parser("revoke", help="revoke a key (live on every pod at its next poll)")
    s.add_argument("key_id")
    s.add_argument("--config", required=True)
    s.set_defaults(func=_keys_revoke)
    s = keys.add_parser("rotate", help="a new key; the old one stays valid for --overlap-s")
    s.add_argument("key_id")
    s.add_argument("--config", required=True)
    s.add_argument("--overlap-s", type=float, default=3600.0)
    s.add_argument("--regions", help="comma-separated regions for the new key (default: the old key's; '' clears)")
    s.add_argument("--deployments", help="comma-separated deployment ids for the new key (default: the old key's; "
                                         "'' clears)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_keys_rotate)

    budgets = sub.add_parser("budgets", help="budget limits").add_subparsers(dest="budgets_command", required=True)
    s = budgets.add_parser("set", help="set a scope's monthly limit (team:T, bu:B, key:ID)")
    s.add_argument("scope")
    s.add_argument("--config", required=True)
    s.add_argument("--monthly-limit", required=True)
    s.add_argument("--soft-pct", type=int)
    s.add_argument("--env", choices=["any", "prod", "dev"])
    s.add_argument("--downgrade-alias")
    s.add_argument("--max-calls", type=int)
    s.add_argument("--spend-per-hour", help="fast spend bucket for key:/team: scopes, a decimal string (e.g. 50.00)")
    s.set_defaults(func=_budgets_set)

    aliases = sub.add_parser("aliases", help="model aliases").add_subparsers(dest="aliases_command", required=True)
    s = aliases.add_parser("set", help="create or replace an alias from a JSON/YAML spec (or @file)")
    s.add_argument("name")
    s.add_argument("--config", required=True)
    s.add_argument("--spec", required=True)
    s.set_defaults(func=_aliases_set)

    prices = sub.add_parser("prices", help="versioned prices").add_subparsers(dest="prices_command", required=True)
    s = prices.add_parser("add", help="publish a new price version ({deployment: {currency, input, output, ...}})")
    s.add_argument("--config", required=True)
    s.add_argument("--spec", required=True)
    s.add_argument("--version", type=int)
    s.add_argument("--valid-from")
    s.add_argument("--allow-large-change", action="store_true")
    s.set_defaults(func=_prices_add)
    s = prices.add_parser("list", help="every price version")
    s.add_argument("--config", required=True)
    s.set_defaults(func=_prices_list)

    teams = sub.add_parser("teams", help="teams").add_subparsers(dest="teams_command", required=True)
    s = teams.add_parser("set", help="create a team or move it to a business unit")
    s.add_argument("name")
    s.add_argument("--config", required=True)
    s.add_argument("--business-unit")
    s.add_argument("--cost-centre", help="finance's allocation code for the team's spend (an app's overrides it)")
    s.add_argument("--body-log", choices=("on", "off"), help="keep the team's request bodies encrypted (docs/budgets.md)")
    s.set_defaults(func=_teams_set)
    apps = sub.add_parser("apps", help="apps").add_subparsers(dest="apps_command", required=True)
    s = apps.add_parser("set", help="create an app of a team or set its cost centre")
    s.add_argument("team")
    s.add_argument("name")
    s.add_argument("--config", required=True)
    s.add_argument("--cost-centre", help="overrides the team's cost centre for this app's spend")
    s.set_defaults(func=_apps_set)
    bus = sub.add_parser("business-units", help="business units").add_subparsers(dest="bu_command", required=True)
    s = bus.add_parser("set", help="create a business unit")
    s.add_argument("name")
    s.add_argument("--config", required=True)
    s.set_defaults(func=_bus_set)

    admin = sub.add_parser("admin", help="admin API access").add_subparsers(dest="admin_command", required=True)
    tokens = admin.add_parser("token", help="admin tokens").add_subparsers(dest="token_command", required=True)
    s = tokens.add_parser("create", help="mint an admin token; printed once, only its hash is stored")
    s.add_argument("--config", required=True)
    s.add_argument("--name", required=True)
    s.add_argument("--role", required=True, choices=["admin", "finance", "auditor"])
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_admin_token_create)
    s = tokens.add_parser("revoke", help="revoke an admin token")
    s.add_argument("--config", required=True)
    s.add_argument("--name", required=True)
    s.set_defaults(func=_admin_token_revoke)

    s = sub.add_parser("audit", help="the audit log of admin changes")
    s.add_argument("--config", required=True)
    s.add_argument("-n", type=int, default=50)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_audit)

    db = sub.add_parser("db", help="config database migrations").add_subparsers(dest="db_command", required=True)
    for name in ("upgrade", "downgrade", "current"):
        s = db.add_parser(name)
        s.add_argument("--config", required=True)
        s.add_argument("--revision")
        s.set_defaults(func=_db)

    config = sub.add_parser("config", help="configuration").add_subparsers(dest="config_command", required=True)
    s = config.add_parser("check", help="validate a config file without starting anything")
    s.add_argument("path")
    s.set_defaults(func=_config_check)
    s = config.add_parser("apply", help="make the config database match the file; prints the diff")
    s.add_argument("path")
    s.add_argument("--allow-large-price-change", action="store_true")
    s.set_defaults(func=_config_apply)

