"""``farebox replay --from --to``: rebuild scope balances from the archive (or Kafka) and compare with live.

Distributed mode:
Reads every request event with an event date in [from, to] (deduplicated by
id, in partition/offset order), rebuilds the scope balances with the same
pure fold the worker runs (``ledger.splitting.rebuild_balances``), and
compares settled, held, overrun and requests of the current period with the
projections the worker wrote to Redis. Prints every difference; exit 0 when
there is none, 1 otherwise. Records that are not events the codec reads are
skipped, as the worker skips them (``streams.dead_letters``), and counted in
the summary line: from Kafka those read, from the archive those it keeps under
``_unreadable/``. From the archive it also reports the archiver group's lag
(records of the topic it has not committed), so differences that are only
that lag are not mistaken for tampering.

Embedded mode: the archive's ledger against the live ledger, scope by scope.
The live ledger of embedded mode is the fold of the SQLite event log (the
gateway runs the same pure fold, ``ledger.balances.Ledger``, over the same
log). Replay reads the events dated [from, to] (UTC event dates, as the
archive is laid out) twice: from the Parquet archive (each id once) and from
the log file (read-only, so ``farebox serve`` may be running), folds each
with ``Ledger``, and compares settled, held, overrun and requests of every
(scope, budget period). It compares the archive as it is: events the log
holds but the archive does not yet (the archiver's lag) show as differences,
and the lag is printed so nobody mistakes them for tampering;
``--archive-first`` archives them before comparing.

Exit 0 when every balance is equal, 1 when any differs, 2 when the archive
cannot be read (empty, corrupt, truncated or newer files: ``ArchiveError``).

The sources are read by ``streams.replay``; what is compared, and how, is ``ledger.replay``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import date, datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Iterable
from zoneinfo import ZoneInfo

from farebox.cli.archive import guarded, warn_left_out

if TYPE_CHECKING:
    from farebox.settings import Settings
    from ledger.events import Event


def _replay(args: argparse.Namespace) -> int:
    from farebox.settings import load_settings

    settings = load_settings(args.config)
    if settings.mode == "embedded" and args.source == "kafka":
        print("error: --source kafka needs mode: distributed (embedded replay compares the archive with the "
              "SQLite log)", file=sys.stderr)
        return 2
    if settings.mode == "embedded":
        return replay_embedded(settings, args.start, args.end, archive=args.archive, archive_first=args.archive_first)
    return replay_distributed(settings, args.start, args.end, source=args.source, archive=args.archive)


def replay_distributed(settings: Settings, start: str, end: str, *, source: str = "archive",
                       archive: str | None = None, now: datetime | None = None) -> int:
    """The archive (or Kafka) rebuilt by the worker's fold, against the worker's projections in Redis."""
    from ledger.periods import period_of
    from ledger.replay import projection_differences
    from ledger.splitting import rebuild_balances
    from streams.archive.kafka_source import archiver_lag
    from streams.replay import archived_events, kafka_events, live_scopes

    d = settings.distributed
    first, last = date.fromisoformat(start), date.fromisoformat(end)
    tz = ZoneInfo(settings.snapshot.budgets.timezone)
    if source == "archive":
        from streams.archive.read import read_unreadable, require_archive

        root = Path(archive) if archive else settings.archive_root
        require_archive(root)
        warn_left_out(root)
        events: Iterable[Event] = archived_events(root, first, last)
        unreadable = read_unreadable(root).num_rows
    else:
        events, unreadable = asyncio.run(kafka_events(d.bootstrap, d.requests_topic, first, last))
    rebuilt = rebuild_balances(events, tz)

    period = period_of(now or datetime.now(timezone.utc), tz)
    diffs = projection_differences(rebuilt, asyncio.run(live_scopes(d.redis_url)), period)
    for line in diffs:
        print(line)
    skipped = f", {unreadable} unreadable record(s) skipped" if unreadable else ""
    print(f"replay {first}..{last} from {source}: {len(rebuilt)} scopes, {len(diffs)} difference(s){skipped}")
    if source == "archive" and (lag := asyncio.run(archiver_lag(d.bootstrap, d.requests_topic,
                                                                settings.archive.group_id))):
        print(f"note: the archiver ({settings.archive.group_id}) is {lag} record(s) behind {d.requests_topic}; "
              f"differences may be only that lag")
    return 0 if not diffs else 1


def replay_embedded(settings: Settings, start: str, end: str, *, archive: str | None = None,
                    archive_first: bool = False) -> int:
    """The archive's ledger against the SQLite log's, every (scope, budget period)."""
    from ledger.replay import balance_differences, fold
    from streams.archive.manifest import archived_offset
    from streams.archive.read import read_unreadable, require_archive
    from streams.replay import archived_events, log_events

    root = Path(archive) if archive else settings.archive_root
    first, last = date.fromisoformat(start), date.fromisoformat(end)
    tz = ZoneInfo(settings.snapshot.budgets.timezone)
    if not settings.event_log_path.exists():
        print(f"error: no event log at {settings.event_log_path}", file=sys.stderr)
        return 2
    if archive_first:
        from streams.archive.service import archive_log_once

        print(f"archived {archive_log_once(settings.event_log_path, root, settings.archive.flush_events)} "
              f"pending event(s) first")
    require_archive(root)
    warn_left_out(root)
    archived = archived_events(root, first, last)
    unreadable = read_unreadable(root).num_rows
    live_events, head = asyncio.run(log_events(settings.event_log_path, first, last))
    lag = max(head - archived_offset(root), 0)
    rebuilt, live = fold(archived, tz), fold(live_events, tz)
    diffs = balance_differences(rebuilt, live)
    for line in diffs:
        print(line)
    print(f"replay {first}..{last} (embedded): read {len(archived)} archived event(s), skipped {unreadable} "
          f"unreadable record(s); the log holds {len(live_events)} event(s) in the window; "
          f"{len(rebuilt.keys() | live.keys())} scope period(s), {len(diffs)} difference(s)")
    if lag:
        print(f"note: the archive is {lag} event(s) behind the log (offset {head}); differences may be "
              f"only that lag — `--archive-first` archives them before comparing")
    return 0 if not diffs else 1


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("replay", help="rebuild scope balances from the archive and compare with the live ledger")
    s.add_argument("--config", required=True)
    s.add_argument("--from", dest="start", required=True, help="first event date, YYYY-MM-DD (UTC)")
    s.add_argument("--to", dest="end", required=True, help="last event date, YYYY-MM-DD (UTC)")
    s.add_argument("--source", choices=("archive", "kafka"), default="archive", help="kafka: distributed only")
    s.add_argument("--archive", help="the archive root (default: archive.path or <state_dir>/archive)")
    s.add_argument("--archive-first", action="store_true",
                   help="embedded: archive the log's pending events before comparing")
    s.set_defaults(func=guarded(_replay))
