"""``farebox rerate --config PATH --from D --to D --price-version N [--apply] [--format table|csv|json]``.

The composition root's part of re-rating: it loads the settings and the live
price book, FX table and currency the way ``farebox export focus`` does,
calls ``reconcile.rerate.archive.plan_rerate`` for the requests admitted on
the UTC days [from, to], prints the difference per team, deployment and day
(stdout; a summary on stderr), and with ``--apply`` appends the
``rating.corrected`` events to the event log: the SQLite log at
``event_log.path`` (embedded) or ``fb.requests`` through ``KafkaEventLog``
(distributed). Ids are deterministic and both logs dedupe on id, so applying
twice changes nothing. In embedded mode the corrections already in the log
but not yet archived are read from the log's tail and passed along, so a
second apply before the archiver catches up computes the same ids again.

A running embedded ``farebox serve`` folds the appended corrections into its
checkpointed and its live (admission) ledger on its next catch-up, within
seconds (``streams.runner``).

Exit 0 after printing (and appending), 1 with a clear message when the re-rate
cannot be made (unknown price version, no archive for the days, an
unpriceable attempt) and nothing is appended, 2 for a configuration problem.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import json
import sys
from datetime import date, datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from farebox.cli.archive import warn_left_out

if TYPE_CHECKING:
    pass


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``rerate`` to the ``farebox`` command line."""
    s = sub.add_parser("rerate", help="re-price archived requests under a price version (a dry run unless --apply)")
    s.add_argument("--config", required=True)
    s.add_argument("--from", dest="start", required=True, help="first UTC day of admissions, YYYY-MM-DD")
    s.add_argument("--to", dest="end", required=True, help="last UTC day of admissions, YYYY-MM-DD")
    s.add_argument("--price-version", type=int, required=True)
    s.add_argument("--apply", action="store_true", help="append the rating.corrected events to the event log")
    s.add_argument("--format", choices=("table", "csv", "json"), default="table")
    s.add_argument("--archive", help="the archive root (default: <state_dir>/archive)")
    s.add_argument("--reason", default="", help="why (recorded in every correction)")
    s.set_defaults(func=rerate_command)


def _day(text: str, flag: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        from reconcile.rerate.reprice import RerateError

        raise RerateError(f"{flag} must be a date like 2026-11-30, got {text!r}") from None


def _render(rows: list[dict[str, object]], fmt: str) -> str:
    from reconcile.rerate.reprice import REPORT_COLUMNS, format_table

    if fmt == "json":
        return json.dumps(rows, indent=2)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=REPORT_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue().rstrip("\n")
    return format_table(rows)


def rerate_command(args: argparse.Namespace) -> int:
    from farebox.cli.events import append_events
    from farebox.config_reader import read_snapshot
    from farebox.settings import load_settings
    from reconcile.rerate.archive import plan_rerate
    from reconcile.rerate.reprice import report_rows
    from streams.archive.pending import unarchived_corrections

    start, end = _day(args.start, "--from"), _day(args.end, "--to")
    settings = load_settings(args.config)
    snapshot = read_snapshot(settings)
    archive = Path(args.archive) if args.archive else settings.archive_root
    warn_left_out(archive)  # files the manifest does not vouch for are not re-rated: named here
    log_path = settings.event_log_path if settings.mode == "embedded" else None
    pending = asyncio.run(unarchived_corrections(log_path, archive))
    result = plan_rerate(archive, start, end, snapshot.price_book, snapshot.fx, args.price_version,
                         now=datetime.now(timezone.utc), pending=pending, reason=args.reason)
    print(_render(report_rows(result), args.format))
    for request_id, why in result.skipped[:10]:
        print(f"skipped {request_id}: {why}", file=sys.stderr)
    if len(result.skipped) > 10:
        print(f"... and {len(result.skipped) - 10} more skipped", file=sys.stderr)
    summary = (f"{result.requests} request(s) admitted {start}..{end}; {len(result.corrections)} correction(s) "
               f"under price version {result.version}, net {result.diff_micro} micro-units")
    if args.apply and result.corrections:
        spooled = asyncio.run(append_events(settings, result.corrections, "rerate"))
        print(f"{summary}; appended to the event log", file=sys.stderr)
        if spooled:
            print(f"warning: Kafka was unreachable: {spooled} correction(s) wait in the spool under "
                  f"{settings.distributed.spool_dir}/rerate and are sent first by the next farebox rerate that "
                  "appends (the ledger dedupes them by id)",
                  file=sys.stderr)
    else:
        print(f"{summary}; {'nothing to append' if args.apply else 'dry run: pass --apply to append them'}",
              file=sys.stderr)
    return 0
