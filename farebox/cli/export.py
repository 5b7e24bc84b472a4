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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from farebox.settings import Settings


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


def live_snapshot(settings: Settings) -> Any:
    """The snapshot ``farebox serve`` would start with: the config database's head, else the last good on disk.

    Returned as ``Any``: naming the snapshot's class would tie this command to the module the proxy keeps it in;
    only its ``price_book``, ``fx`` and ``currency`` are read."""
    from farebox.control import open_config_db
    from proxy.control.document import compile_document, load_last_good
    from proxy.control.errors import ControlUnavailable
    from proxy.control.problems import ConfigError

    try:
        db = open_config_db(settings)
    except ControlUnavailable:
        db = None
    if db is not None:
        try:
            head = db.head()
            if head is not None:
                return compile_document(db.document(head[0]), head[0])
        except ControlUnavailable:
            pass
        finally:
            db.close()
    saved = load_last_good(settings.state_dir)
    if saved is None:
        raise ConfigError([f"the config database ({settings.safe_db_url}) is unreachable and there is no last "
                           f"good snapshot in {settings.state_dir}"], str(settings.config_path))
    return compile_document(saved[1], saved[0])


def export_focus_command(args: argparse.Namespace) -> int:
    from farebox.settings import load_settings
    from reconcile.focus.corrections import read_corrections
    from reconcile.focus.export import FocusError, export_focus, parse_month
    from reconcile.focus.rerated import archived_corrections

    try:
        parse_month(args.month)  # a bad month is refused before anything is opened
        settings = load_settings(args.config)
        snapshot = live_snapshot(settings)
        archive = Path(args.archive) if args.archive else settings.archive_root
        corrections = read_corrections(Path(args.corrections) if args.corrections
                                       else settings.state_dir / "corrections")
        corrections += archived_corrections(archive, parse_month(args.month), snapshot.price_book, snapshot.fx,
                                            snapshot.currency)
        summary = export_focus(archive, args.month, snapshot.price_book, snapshot.fx, args.out, corrections,
                               currency=snapshot.currency)
    except FocusError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(summary.describe(), file=sys.stderr)
    return 0
