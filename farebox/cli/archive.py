"""The archive and audit commands of the ``farebox`` CLI (``register`` adds them to ``farebox.cli``).

    farebox archiver --config PATH                       distributed: requests topic -> archive until SIGTERM
    farebox archive flush --config PATH                  embedded: archive the pending log events now
    farebox archive verify --config PATH [--archive R] [--expect-head H] [--publish]
                                                         every file and the manifest chain (and that the head a
                                                         second system kept is still in it); exit 0 only if intact
    farebox archive compact --config PATH [--archive R] [--before YYYY-MM-DD]
                                                         closed days -> daily files, then retention
    (farebox replay: farebox/cli/replay.py)

Exit codes: 0 done / intact / equal; 1 the archive is not intact or replay
found differences; 2 bad input (settings, an empty, corrupt, truncated or
newer archive: the message names the file; nothing is rewritten).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import date, datetime, timezone
from pathlib import Path


def _settings(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from farebox.settings import load_settings

    return load_settings(args.config)


def _root(args: argparse.Namespace, settings) -> Path:  # type: ignore[no-untyped-def]
    return Path(args.archive) if getattr(args, "archive", None) else settings.archive_root


def warn_left_out(root: Path) -> int:
    """Print on stderr every archive file the readers leave out or miss (``streams.archive.vouch``); how many."""
    from streams.archive.read import archive_warnings

    warnings = archive_warnings(root)
    for line in warnings:
        print(f"warning: {line}", file=sys.stderr)
    return len(warnings)


def _archiver(args: argparse.Namespace) -> int:
    from farebox.archiver import run_kafka_archiver

    settings = _settings(args)
    if settings.mode != "distributed":
        print("error: `farebox archiver` archives Kafka (mode: distributed); in embedded mode `farebox serve` "
              "archives its log itself", file=sys.stderr)
        return 2
    archived = asyncio.run(run_kafka_archiver(settings))
    print(f"farebox archiver stopped: {archived} event(s) archived", flush=True)
    return 0


def _flush(args: argparse.Namespace) -> int:
    from streams.archive.service import archive_log_once

    settings = _settings(args)
    if settings.mode != "embedded" or not settings.event_log_path.exists():
        print(f"error: no embedded event log at {settings.event_log_path} (distributed: `farebox archiver`)",
              file=sys.stderr)
        return 2
    root = _root(args, settings)
    print(f"archived {archive_log_once(settings.event_log_path, root, settings.archive.flush_events)} event(s) "
          f"to {root}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from streams.archive.manifest import verify

    settings = _settings(args)
    root = _root(args, settings)
    verdict = verify(root, expect_head=args.expect_head)
    if verdict.empty:
        print(f"error: the archive at {root} is empty: no manifest and no files to verify", file=sys.stderr)
        return 2
    for line in verdict.problems:
        print(line)
    for line in verdict.notes:
        print(f"note: {line}")
    if verdict.intact and args.publish:
        from farebox.cli.events import append_events
        from ledger.events import ArchiveHead

        event = ArchiveHead(time=datetime.now(timezone.utc), entry=verdict.head_seq, head=verdict.head,
                            files=verdict.files)
        spooled = asyncio.run(append_events(settings, [event], "archive"))
        print(f"published {event.id} to the event log" + (" (spooled: Kafka was unreachable)" if spooled else ""))
    if verdict.intact:
        anchored = ", the expected head is in the chain" if args.expect_head else ""
        print(f"archive {root}: intact — {verdict.files} file(s), {verdict.entries} manifest entries, chain unbroken"
              f"{anchored}, head {verdict.head} (entry {verdict.head_seq})")
        return 0
    print(f"archive {root}: NOT intact — {len(verdict.problems)} problem(s) in {verdict.files} listed file(s) and "
          f"{verdict.entries} manifest entries")
    return 1


def _compact(args: argparse.Namespace) -> int:
    from farebox.archiver import derive_of
    from streams.archive.compact import compact
    from streams.archive.service import housekeep

    settings = _settings(args)
    root = _root(args, settings)
    now = datetime.now(timezone.utc)
    if args.before:
        done = compact(root, before=date.fromisoformat(args.before), now=now)
    else:
        done = housekeep(root, settings.archive, now, derive_of(settings))
    days = ", ".join(str(d) for d in done.compacted_days) or "none"
    print(f"compacted day(s): {days} ({len(done.written)} daily file(s) written, {done.replaced} replaced); "
          f"expired {done.expired} file(s); finished {done.leftovers_deleted} interrupted delete(s)")
    return 0


def guarded(func):  # type: ignore[no-untyped-def]
    """An unreadable archive is bad input: a clear message naming the file, exit 2."""

    def run(args: argparse.Namespace) -> int:
        from streams.archive.read import ArchiveError

        try:
            return func(args)
        except ArchiveError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except ValueError as exc:  # a malformed --from/--to/--before date
            print(f"error: {exc}", file=sys.stderr)
            return 2

    return run


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``archiver`` and ``archive …`` to the CLI's subcommands."""
    s = sub.add_parser("archiver", help="distributed: archive the requests topic to Parquet until SIGTERM")
    s.add_argument("--config", required=True)
    s.set_defaults(func=guarded(_archiver))

    archive = sub.add_parser("archive", help="the Parquet archive").add_subparsers(dest="archive_command",
                                                                                    required=True)
    for name, func, text in (
        ("flush", _flush, "embedded: archive the log's pending events now"),
        ("verify", _verify, "check every archive file and the manifest chain; names changed/missing/unlisted"),
        ("compact", _compact, "merge closed days into daily files, then apply retention"),
    ):
        s = archive.add_parser(name, help=text)
        s.add_argument("--config", required=True)
        s.add_argument("--archive", help="the archive root (default: archive.path or <state_dir>/archive)")
        if name == "verify":
            s.add_argument("--expect-head", help="a head hash published earlier (the farebox_archive_head metric, "
                                                 "an alert, an archive.head event): fail unless it is still in the "
                                                 "chain")
            s.add_argument("--publish", action="store_true", help="when intact, append an archive.head event (the "
                                                                  "head) to the event log, for a second system")
        if name == "compact":
            s.add_argument("--before", help="compact event dates before this one, YYYY-MM-DD (default: today, "
                                            "UTC), and skip retention")
        s.set_defaults(func=guarded(func))
