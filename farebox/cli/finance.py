"""The finance commands: SQL over the warehouse, its shell, and the showback report.

    farebox finance sql "SELECT ..." [--config PATH | --archive DIR] [--format table|csv|json] [--out FILE]
    farebox finance shell [--config PATH | --archive DIR]
    farebox report showback --config PATH --month YYYY-MM [--by team,app,alias,model,cost_centre]
                            [--format table|csv|json] [--archive DIR]

The composition root's part: find the archive (``--archive``, else
``<state_dir>/archive``), the budget time zone and the budget limits (the live
config snapshot in the config database, as ``farebox budgets set`` left it),
and hand them to ``reconcile`` as plain values. Every failure the warehouse
names (empty archive, unreadable or newer file, unknown column, a month with
no data) is one line on stderr and exit 1. Archive files the manifest does not
vouch for are left out of every view and each named on stderr (``warning:``).

``finance sql`` and ``finance shell`` run user SQL on a locked warehouse: file
access off except the vouched-for archive files, read-only statements only
(``reconcile.warehouse``); a result leaves through ``--out FILE`` (``.out`` in
the shell), written by this process.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reconcile.dimensions import DIMENSIONS
from reconcile.render import FORMATS, render

# reconcile.warehouse and reconcile.showback (DuckDB, pyarrow) load when a finance command runs, not when the
# parser is built for any command (``farebox serve`` builds it too).

if TYPE_CHECKING:
    pass

DEFAULT_TZ = "Asia/Kolkata"


@dataclass(frozen=True)
class FinanceContext:
    """Where the archive is, the budget zone, and each budget scope's limit (plain data for reconcile)."""

    archive: Path
    tz: str
    budgets: dict[str, dict[str, Any]]
    fleets: Any = None  # reconcile.showback.Fleets: what prices fleet hours (from --config)


def context(args: argparse.Namespace, *, need_budgets: bool = False) -> FinanceContext:
    from reconcile.warehouse import WarehouseError

    if args.config is None:
        if args.archive is None or need_budgets:
            raise WarehouseError("pass --config PATH (the gateway's farebox.yaml)"
                                 + ("" if need_budgets else ", or --archive DIR"))
        return FinanceContext(Path(args.archive), getattr(args, "tz", None) or DEFAULT_TZ, {})
    from farebox.config_reader import read_snapshot
    from farebox.settings import load_settings

    settings = load_settings(args.config)
    snapshot = read_snapshot(settings)
    policy = snapshot.budgets
    budgets = {scope: {"limit_micro": limit.limit_micro, "soft_pct": limit.soft_pct}
               for scope, limit in policy.scopes.items()}
    archive = Path(args.archive) if args.archive else settings.archive_root
    from reconcile.showback import Fleets

    return FinanceContext(archive, policy.timezone, budgets, Fleets(snapshot.price_book, snapshot.fx, snapshot.currency))


def _warn(warnings: tuple[str, ...]) -> None:
    for line in warnings:
        print(f"warning: {line}", file=sys.stderr)


def _sql(args: argparse.Namespace) -> int:
    from farebox.cli.finance_shell import write_result
    from reconcile.warehouse import Warehouse

    ctx = context(args)
    with Warehouse(ctx.archive, tz=ctx.tz, locked=True) as warehouse:
        _warn(warehouse.warnings)
        if args.out:
            rows = write_result(warehouse, args.query, Path(args.out), args.format)
            print(f"{rows} row(s) written to {args.out}", file=sys.stderr)
        else:
            sys.stdout.write(render(warehouse.query(args.query), args.format))
    return 0


def _shell(args: argparse.Namespace) -> int:
    from farebox.cli.finance_shell import shell

    ctx = context(args)
    return shell(ctx.archive, ctx.tz)


def _showback(args: argparse.Namespace) -> int:
    from reconcile.showback import showback
    from reconcile.warehouse import Warehouse

    ctx = context(args, need_budgets=True)
    by = [name.strip() for name in args.by.split(",") if name.strip()]
    with Warehouse(ctx.archive, tz=ctx.tz) as warehouse:
        _warn(warehouse.warnings)
        result = showback(warehouse, args.month, by, ctx.budgets, ctx.fleets)
        sys.stdout.write(render(result, args.format))
    corrected = [row for row in result.dicts() if row.get("corrected_micro")]
    if corrected:
        print(f"note: {len(corrected)} row(s) of {args.month} include re-rating corrections: spend_micro and the "
              "budget_* columns are corrected figures; corrected_micro is the net correction in each",
              file=sys.stderr)
    return 0


def _where(s: argparse.ArgumentParser, *, config_required: bool = False) -> None:
    s.add_argument("--config", required=config_required, help="the gateway's farebox.yaml")
    s.add_argument("--archive", help="the archive folder (default: <state_dir>/archive)")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``finance`` and ``report`` to the ``farebox`` command line."""
    finance = sub.add_parser("finance", help="the finance warehouse (DuckDB over the archive)").add_subparsers(
        dest="finance_command", required=True)
    s = finance.add_parser("sql", help="run one SQL query over the warehouse views")
    s.add_argument("query")
    _where(s)
    s.add_argument("--tz", help=f"budget time zone with --archive alone (default {DEFAULT_TZ})")
    s.add_argument("--format", choices=FORMATS, default="table")
    s.add_argument("--out", help="write the result to this file (in --format; .parquet: Parquet) instead of stdout")
    s.set_defaults(func=_sql)
    s = finance.add_parser("shell", help="an SQL prompt over the warehouse views (read-only, archive files only)")
    _where(s)
    s.add_argument("--tz", help=f"budget time zone with --archive alone (default {DEFAULT_TZ})")
    s.set_defaults(func=_shell)

    report = sub.add_parser("report", help="finance reports").add_subparsers(dest="report_command", required=True)
    s = report.add_parser("showback", help="a month's spend, requests, tokens, fallbacks and budgets by group")
    _where(s, config_required=True)
    s.add_argument("--month", required=True, help="budget month YYYY-MM (calendar month in budgets.timezone)")
    s.add_argument("--by", default="team", help=f"comma-separated, from: {','.join(DIMENSIONS)} (default team)")
    s.add_argument("--format", choices=FORMATS, default="table")
    s.set_defaults(func=_showback)
