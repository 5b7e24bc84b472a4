"""``farebox replay`` in embedded mode: the archive's ledger against the live ledger, scope by scope.

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
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterable
from datetime import date
from pathlib import Path
from zoneinfo import ZoneInfo

import orjson

from farebox.settings import Settings
from ledger.balances import Ledger, ScopeBalance
from ledger.codec import decode, from_dict
from ledger.events import Event
from streams.archive.manifest import archived_offset
from streams.archive.read import read_archive, read_unreadable, require_archive
from streams.sqlite_log import SqliteEventLog

FIELDS = ("settled", "held", "overrun", "requests")


def fold(events: Iterable[Event], tz: ZoneInfo) -> dict[tuple[str, str], ScopeBalance]:
    """Every (scope, balance period) of the ledger folded from ``events`` in order."""
    ledger = Ledger(tz)
    for event in events:
        ledger.apply(event)
    return ledger.balances()


def differences(archive: dict[tuple[str, str], ScopeBalance], live: dict[tuple[str, str], ScopeBalance]) -> list[str]:
    """One line per field that differs, every (scope, period) of either side, in order."""
    empty = ScopeBalance()
    out = []
    for scope, period in sorted(archive.keys() | live.keys()):
        mine, theirs = archive.get((scope, period), empty), live.get((scope, period), empty)
        for name in FIELDS:
            if getattr(mine, name) != getattr(theirs, name):
                out.append(f"{scope} {period} {name}: archive {getattr(mine, name)} != live {getattr(theirs, name)}")
    return out


async def log_events(path: Path, first: date, last: date, page: int = 10_000) -> tuple[list[Event], int]:
    """The log's events dated [first, last], in offset order, and the log's last offset. Only events in
    the window are decoded (their UTC date is the prefix of the stored ``time``)."""
    lo, hi = first.isoformat(), last.isoformat()
    log = SqliteEventLog.open(path, readonly=True)
    try:
        head = log.last_offset
        out: list[Event] = []
        after = 0
        while after < head and (rows := await log.read_payloads(after=after, limit=page)):
            for offset, payload in rows:
                wire = orjson.loads(payload)
                if offset <= head and lo <= wire["time"][:10] <= hi:
                    out.append(from_dict(wire))
            after = rows[-1][0]
        return out, head
    finally:
        await log.close()


def replay_embedded(settings: Settings, start: str, end: str, *, archive: str | None = None,
                    archive_first: bool = False) -> int:
    root = Path(archive) if archive else settings.archive_root
    first, last = date.fromisoformat(start), date.fromisoformat(end)
    tz = ZoneInfo(settings.snapshot.budgets.timezone)
    if not settings.event_log_path.exists():
        print(f"error: no event log at {settings.event_log_path}", file=sys.stderr)
        return 2
    if archive_first:
        from farebox.archiving import archive_log_once

        print(f"archived {archive_log_once(settings.event_log_path, root, settings.archive.flush_events)} "
              f"pending event(s) first")
    require_archive(root)
    table = read_archive(root, first, last, columns=["event"])
    archived = [decode(text) for text in table.column("event").to_pylist()]
    unreadable = read_unreadable(root).num_rows
    live_events, head = asyncio.run(log_events(settings.event_log_path, first, last))
    lag = max(head - archived_offset(root), 0)
    rebuilt, live = fold(archived, tz), fold(live_events, tz)
    diffs = differences(rebuilt, live)
    for line in diffs:
        print(line)
    print(f"replay {first}..{last} (embedded): read {len(archived)} archived event(s), skipped {unreadable} "
          f"unreadable record(s); the log holds {len(live_events)} event(s) in the window; "
          f"{len(rebuilt.keys() | live.keys())} scope period(s), {len(diffs)} difference(s)")
    if lag:
        print(f"note: the archive is {lag} event(s) behind the log (offset {head}); differences may be "
              f"only that lag — `--archive-first` archives them before comparing")
    return 0 if not diffs else 1
