"""``farebox export focus --config PATH --month YYYY-MM --out FILE.csv|FILE.parquet``: the FOCUS export.

The composition root's part: it loads the settings, takes the price book, FX
table and budget currency from the live snapshot the way ``farebox serve``
does (the config database's head version; its last good snapshot on disk when
the database is unreachable), reads the corrections: the archived
``rating.corrected`` events (``reconcile.focus.rerated``; the event log is
the system of record) and any correction files in the corrections folder, and
hands them to ``reconcile.focus.export.export_focus`` as values. Exit 0 with a summary line
on stderr (how the file reconciles with the ledger), 1 with a clear message
when the export cannot be made (bad month, no data, an unpriceable attempt,
an unreadable archive file), 2 for a configuration problem.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from farebox.cli.archive import warn_left_out

if TYPE_CHECKING:
    pass


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``export focus`` to the ``farebox`` command line."""
    export = sub.add_parser("export", help="exports for finance tools").add_subparsers(dest="export_command",
                                                                                       required=True)
    s = export.add_parser("focus", help="a month's usage as a FOCUS 1.2 file (CSV or Parquet)")
    s.add_argument("--config", required=True)
    s.add_argument("--month", required=True, help="calendar month in UTC, YYYY-MM")
    s.add_argument("--out", required=True, help="the file to write: *.csv or *.parquet")
    s.add_argument("--archive", help="the archive root (default: <state_dir>/archive)")
    s.add_argument("--corrections", help="folder of extra correction files, besides the archived "
                                         "rating.corrected events (default: <state_dir>/corrections; "
                                         "missing means none)")
    s.set_defaults(func=export_focus_command)


def export_focus_command(args: argparse.Namespace) -> int:
    from farebox.config_reader import read_snapshot
    from farebox.settings import load_settings
    from reconcile.focus.corrections import read_corrections
    from reconcile.focus.export import export_focus, parse_month
    from reconcile.focus.rerated import archived_corrections
    from reconcile.invoices import invoice_ids, invoices_path, read_invoices

    parse_month(args.month)  # a bad month is refused before anything is opened
    settings = load_settings(args.config)
    snapshot = read_snapshot(settings)
    archive = Path(args.archive) if args.archive else settings.archive_root
    warn_left_out(archive)  # files the manifest does not vouch for are not exported: named here
    corrections = read_corrections(Path(args.corrections) if args.corrections
                                   else settings.state_dir / "corrections")
    corrections += archived_corrections(archive, parse_month(args.month), snapshot.price_book, snapshot.fx,
                                        snapshot.currency)
    invoices = invoice_ids(read_invoices(invoices_path(settings.state_dir)))  # what reconciliation has seen
    summary = export_focus(archive, args.month, snapshot.price_book, snapshot.fx, args.out, corrections,
                           currency=snapshot.currency, invoices=invoices)
    print(summary.describe(), file=sys.stderr)
    return 0
