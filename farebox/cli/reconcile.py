"""``farebox reconcile --config PATH --date D [--account A] [--format table|csv|json] [--archive ROOT] [--out F]``.

The composition root's part of the daily reconciliation: it loads the
settings and the live snapshot (price book, FX, deployments) the way
``farebox export focus`` does, decides where each provider account's export
comes from (``reconcile.accounts`` in the config; an unlisted account served
by the simulator reads the simulator) and reads admin keys by name from the
environment or the secrets file. In embedded mode it first brings the archive
up to date from the SQLite event log, so the report covers everything the
gateway recorded (in distributed mode the archiver keeps the archive). Then:
fetch, compare, print, write the report (``<state_dir>/reconcile/<date>.json``,
or ``<date>.<account>.json`` for one account, or ``--out``), append
``reconcile.reported`` to the event log the mode names
(``farebox.cli.events``: the SQLite log, or the Kafka requests topic).

A re-run of an unchanged day rewrites the same file and appends nothing new (the
event id holds the content hash; the SQLite log and Kafka's consumers dedupe by id); a re-run whose
figures changed appends a new event: a new version of that day's report.

Exit status: 0 nothing flagged, 1 something flagged, 2 bad input (bad date,
unknown account, an account with no export source or no credentials, a day
with no archive, an export that does not parse; the message names it),
3 a provider export could not be fetched.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import date, datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from farebox.cli.archive import warn_left_out
from streams.archive.manifest import file_lock

if TYPE_CHECKING:
    from farebox.settings import Settings
    from reconcile.daily import ExportPlan


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``reconcile`` to the ``farebox`` command line."""
    s = sub.add_parser("reconcile", help="compare a UTC day's provider usage exports with our records")
    s.add_argument("--config", required=True)
    s.add_argument("--date", required=True, help="the UTC day, YYYY-MM-DD")
    s.add_argument("--account", help="only this provider account (default: every account in the deployments)")
    s.add_argument("--format", choices=("table", "csv", "json"), default="table")
    s.add_argument("--archive", help="the archive root (default: <state_dir>/archive)")
    s.add_argument("--out", help="the report file (default: <state_dir>/reconcile/<date>.json)")
    s.add_argument("--metrics-dir", help="where the Prometheus textfile per account goes "
                                         "(default: <state_dir>/reconcile/metrics)")
    s.set_defaults(func=reconcile_command)


def export_plans(settings: Settings, snapshot: Any, only: str | None,
                 env: dict[str, str] | None = None) -> list[ExportPlan]:
    """One plan per provider account of the deployments (or ``only``); bad input raises ``ReconcileInputError``."""
    from urllib.parse import urlsplit

    from farebox.secrets import resolve_secrets
    from reconcile.daily import ExportPlan, ReconcileInputError

    deployments: dict[str, Any] = {}
    for dep in snapshot.deployments.values():
        deployments.setdefault(dep.account, dep)
    if only is not None and only not in deployments:
        raise ReconcileInputError(f"account {only!r} is in no deployment (known: {', '.join(sorted(deployments))})")
    plans = []
    for account in sorted([only] if only else deployments):
        dep = deployments[account]
        configured = settings.reconcile.accounts.get(account)
        if configured is None and not dep.provider.startswith("sim"):
            raise ReconcileInputError(
                f"account {account}: no usage export source; add reconcile.accounts.{account} with source "
                "openai or anthropic and admin_key_env naming its admin key, or aws, google or azure and the path "
                "of the export's local copy")
        if configured is None or configured.source == "simulator":
            origin = urlsplit(dep.base_url)  # the simulator serves its export at its root, whatever the dialect's path
            base = (configured and configured.base_url) or f"{origin.scheme}://{origin.netloc}"
            plans.append(ExportPlan(account, dep.provider, "simulator", base))
            continue
        if configured.source in ("aws", "google", "azure"):
            ours = tuple(sorted({d.model for d in snapshot.deployments.values() if d.account == account}))
            plans.append(ExportPlan(account, dep.provider, configured.source, path=configured.path,
                                    cur_path=configured.cur_path, models=configured.models, ours=ours))
            continue
        name = configured.admin_key_env
        found, _ = resolve_secrets(settings, [name], env)
        if name not in found:
            raise ReconcileInputError(f"account {account}: no credentials: the admin key {name} is not set in the "
                                      "environment or the secrets file")
        plans.append(ExportPlan(account, dep.provider, configured.source, configured.base_url, found[name]))
    return plans


def report_path(settings: Settings, day: date, only: str | None, out: str | None) -> Path:
    if out:
        return Path(out)
    return settings.state_dir / "reconcile" / (f"{day.isoformat()}.{only}.json" if only else f"{day.isoformat()}.json")


def reconcile_command(args: argparse.Namespace) -> int:
    from farebox.config_reader import read_snapshot
    from farebox.settings import load_settings
    from reconcile.report import exit_code, render

    try:
        day = date.fromisoformat(args.date)
    except ValueError:
        print(f"error: --date must be a day YYYY-MM-DD, got {args.date!r}", file=sys.stderr)
        return 2
    settings = load_settings(args.config)
    snapshot = read_snapshot(settings)
    plans = export_plans(settings, snapshot, args.account)
    report, path, event_id = asyncio.run(_run(settings, snapshot, plans, day, args))
    sys.stdout.write(render(report, args.format, event_id))
    print(f"report written to {path}; {len(report.flagged)} of {len(report.rows)} rows flagged", file=sys.stderr)
    return exit_code(report)


async def _run(settings: Settings, snapshot: Any, plans: list[ExportPlan], day: date,
               args: argparse.Namespace) -> tuple[Any, Path, str]:
    import aiohttp

    from farebox.cli.events import append_events
    from reconcile.daily import currencies, fetch_exports, our_side, require_archive
    from reconcile.invoices import invoices_path, record_invoices
    from reconcile.report import build_report, report_json, reported_event

    archive = Path(args.archive) if args.archive else settings.archive_root
    if settings.mode == "embedded":
        await _archive_embedded(settings, archive)
    require_archive(archive, day)
    warn_left_out(archive)  # files the manifest does not vouch for are not reconciled: named here
    async with aiohttp.ClientSession() as session:
        usage, costs = await fetch_exports(plans, day, session)
    ours = await asyncio.to_thread(our_side, archive, day, snapshot.price_book, snapshot.fx, currencies(costs))
    report = build_report(day, {p.account: p.provider for p in plans}, usage, costs, ours.usage, ours.money,
                          threshold=settings.reconcile.drift_threshold_pct,
                          unattributed_expired=ours.unattributed_expired,
                          current_price_version=ours.current_price_version)
    event = reported_event(report, datetime.now(timezone.utc))
    path = report_path(settings, day, args.account, args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(report_json(report, event.id))
    tmp.replace(path)
    write_metrics(report, Path(args.metrics_dir) if args.metrics_dir else settings.state_dir / "reconcile" / "metrics")
    record_invoices(invoices_path(settings.state_dir), costs)  # the FOCUS export's InvoiceId
    # after the file: a failed append is redone by re-running (same id)
    if await append_events(settings, [event], "reconcile"):
        print(f"warning: Kafka was unreachable: the report event waits in the spool under "
              f"{settings.distributed.spool_dir}/reconcile and is sent by the next farebox reconcile",
              file=sys.stderr)
    return report, path, event.id


def write_metrics(report: Any, folder: Path) -> list[Path]:
    """One Prometheus textfile per account of ``report`` (for node_exporter's textfile collector).

    ``farebox reconcile`` is a batch job with no scrape endpoint, so its gauges
    go to ``farebox_reconcile.<account>.prom`` in ``folder``, each replaced
    atomically by prometheus-client: the latest run of an account is what a
    scrape sees, and accounts reconciled in separate runs never collide.
    """
    from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

    from reconcile.report import drift_by_account

    folder.mkdir(parents=True, exist_ok=True)
    drift = drift_by_account(report)
    day = datetime(report.day.year, report.day.month, report.day.day, tzinfo=timezone.utc).timestamp()
    written = []
    for account in report.accounts:
        provider = report.providers[account]
        registry = CollectorRegistry()
        ratio = Gauge("farebox_reconcile_drift_ratio", "Largest |provider - ours| / provider of the account's "
                      "rows in its latest reconciliation", ["provider", "account", "measure"], registry=registry)
        for (prov, acct, measure), value in sorted(drift.items()):
            if acct == account:
                ratio.labels(prov, acct, measure).set(float(value))  # a ratio for alerting, never money
        flagged = sum(1 for r in report.flagged if r.account == account)
        Gauge("farebox_reconcile_flagged_rows", "Rows beyond the drift threshold in the account's latest "
              "reconciliation", ["provider", "account"], registry=registry).labels(provider, account).set(flagged)
        Gauge("farebox_reconcile_day_seconds", "Start (UTC) of the day the account's latest reconciliation "
              "covered", ["provider", "account"], registry=registry).labels(provider, account).set(day)
        Gauge("farebox_reconcile_last_run_timestamp_seconds", "When the account's latest reconciliation ran",
              ["provider", "account"], registry=registry).labels(provider, account).set_to_current_time()
        target = folder / f"farebox_reconcile.{account}.prom"
        write_to_textfile(str(target), registry)
        written.append(target)
    return written


async def _archive_embedded(settings: Settings, archive: Path) -> None:
    """Embedded: bring the archive up to date from the SQLite log (distributed: the archiver keeps it)."""
    from reconcile.daily import ReconcileInputError
    from streams.archive.write import archive_from_log
    from streams.sqlite_log import SqliteEventLog

    if not settings.event_log_path.exists():
        raise ReconcileInputError(f"no event log at {settings.event_log_path}: has the gateway run with this config?")
    log = SqliteEventLog.open(settings.event_log_path, readonly=True)
    try:
        with file_lock(archive / "_state" / "log.lock"):  # the log archiver's lock (streams/archive/service.py)
            await archive_from_log(log, archive)
    finally:
        await log.close()
