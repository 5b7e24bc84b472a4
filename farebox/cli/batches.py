"""``farebox batches list|show|cancel``: the batches of every team, read from the batch store
(``batches.url``: the same database the gateways run them from, in every mode).

    farebox batches list --config PATH [--team T] [--status S] [-n N] [--json]
    farebox batches show BATCH_ID --config PATH [--json]
    farebox batches cancel BATCH_ID --config PATH

``list`` prints one line per batch (newest first): id, team, status, lines done of total, failed, cost so
far; ``show`` the batch as the admin API answers it. ``cancel`` asks the runners to stop the batch: lines not
started never run, lines in flight finish; a gateway process ends it (``cancelled``) once none is in flight.
An unknown id is a clear message and exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from pricing.money import format_money


def _open(config: str) -> tuple[Any, Any]:
    from farebox.settings import load_settings
    from proxy.batches.sql_store import SqlBatches

    settings = load_settings(config)
    return settings, SqlBatches(settings.batches.url)


def _view(record: Any, currency: str) -> dict[str, Any]:
    from proxy.batches.objects import batch_object

    return {**batch_object(record), "team": record.team, "key_id": record.key_id,
            "via": "provider" if record.provider is not None else "gateway",
            "cost": format_money(record.counts.cost_micro, currency),
            "saved": format_money(record.counts.list_micro - record.counts.cost_micro, currency)}


def _list(args: argparse.Namespace) -> int:
    settings, store = _open(args.config)
    found = asyncio.run(store.list_batches(args.team, None, args.n, args.status))
    currency = settings.snapshot.currency if settings.snapshot is not None else "INR"
    if args.json:
        print(json.dumps([_view(b, currency) for b in found], indent=2))
        return 0
    print(f"{'batch':<32} {'team':<16} {'status':<11} {'done':>13} {'failed':>7} {'cost':>14} {'saved':>12}  created")
    for b in found:
        c = b.counts
        created = time.strftime("%Y-%m-%d %H:%M", time.gmtime(b.created_at))
        print(f"{b.id:<32} {b.team:<16} {b.status:<11} {f'{c.completed + c.failed}/{c.total}':>13} {c.failed:>7} "
              f"{format_money(c.cost_micro, currency):>14} {format_money(c.list_micro - c.cost_micro, currency):>12}  "
              f"{created}Z")
    return 0


def _show(args: argparse.Namespace) -> int:
    settings, store = _open(args.config)
    record = asyncio.run(store.get_batch(args.batch_id))
    if record is None:
        print(f"error: no batch {args.batch_id}", flush=True)
        return 2
    currency = settings.snapshot.currency if settings.snapshot is not None else "INR"
    print(json.dumps(_view(record, currency), indent=2))
    return 0


def _cancel(args: argparse.Namespace) -> int:
    _, store = _open(args.config)
    record = asyncio.run(store.get_batch(args.batch_id))
    if record is None:
        print(f"error: no batch {args.batch_id}", flush=True)
        return 2
    from proxy.batches.records import CANCELLABLE

    if record.status not in CANCELLABLE:
        print(f"error: batch {args.batch_id} is {record.status}; only a batch in progress can be cancelled",
              flush=True)
        return 2
    after = asyncio.run(store.cancel(args.batch_id, int(time.time())))
    print(f"batch {args.batch_id}: {after.status if after else 'gone'}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    group = sub.add_parser("batches", help="batches of every team").add_subparsers(dest="batches_command",
                                                                                     required=True)
    ls = group.add_parser("list", help="batches, newest first")
    ls.add_argument("--config", required=True)
    ls.add_argument("--team")
    ls.add_argument("--status", choices=("in_progress", "cancelling", "completed", "failed", "expired",
                                         "cancelled"))
    ls.add_argument("-n", type=int, default=50)
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=_list)
    show = group.add_parser("show", help="one batch")
    show.add_argument("batch_id")
    show.add_argument("--config", required=True)
    show.set_defaults(func=_show)
    cancel = group.add_parser("cancel", help="stop a batch: lines not started never run")
    cancel.add_argument("batch_id")
    cancel.add_argument("--config", required=True)
    cancel.set_defaults(func=_cancel)
