"""``farebox events tail``, and the event log a one-shot CLI command appends to: the one ``settings.mode`` names.

Embedded: the SQLite log at ``event_log.path`` (it dedupes by id).
Distributed: Kafka through ``KafkaEventLog``, whose routing puts request,
rating and reconcile events on the requests topic; its disk spool is
``<distributed.spool_dir>/<name>``, so when Kafka is unreachable the events
wait there and the next command of the same name that appends sends them
first (consumers dedupe by id).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from pathlib import Path

from farebox.settings import Settings
from ledger.events import Event


async def append_events(settings: Settings, events: Sequence[Event], name: str) -> int:
    """Append ``events`` in order and wait until each is durable (or spooled); returns how many were spooled."""
    spooled = -1
    if settings.mode == "distributed":
        from streams.kafka.log import SPOOLED, KafkaEventLog

        spooled = SPOOLED
        d = settings.distributed
        log = KafkaEventLog(d.bootstrap, Path(d.spool_dir) / name, requests_topic=d.requests_topic,
                            scope_topic=d.scope_topic, config_topic=d.config_topic, client_id=f"farebox-{name}")
    else:
        from streams.sqlite_log import SqliteEventLog

        log = SqliteEventLog.open(settings.event_log_path)
    try:
        offsets = await asyncio.gather(*[log.append(event) for event in events])
        await log.flush()
    finally:
        await log.close()
    return sum(1 for offset in offsets if offset == spooled)


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


def register(sub: argparse._SubParsersAction) -> None:
    events = sub.add_parser("events", help="the event log").add_subparsers(dest="events_command", required=True)
    s = events.add_parser("tail", help="show recent events readably")
    s.add_argument("--config", required=True)
    s.add_argument("-n", type=int, default=20)
    s.add_argument("--follow", "-f", action="store_true")
    s.set_defaults(func=_events_tail)
