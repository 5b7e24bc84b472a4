"""Benchmark (run by hand, never a timed assertion): ledger start-up with and without checkpoints.

    .venv/bin/python tests/ledger/bench_rebuild.py [EVENTS]     # default 1,000,000

Writes EVENTS request events (admitted / attempted / settled triples, 200
teams x 50 keys, crossing from November into December in Kolkata) to a
SqliteEventLog in a temp dir, then prints:

* the full fold from offset 0 (``streams.checkpoints.rebuild`` with no
  checkpoint), and how that splits into log read + decode vs ``Ledger.apply``;
* the checkpoint size at 1,000 events before the end (and after pruning
  the previous month's closed request ids);
* the rebuild from that checkpoint (what start-up costs with checkpoints).
"""

from __future__ import annotations

import asyncio
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "streams"))
import orjson
from checkpoint_events import IST, request_events

from ledger.balances import Ledger
from ledger.periods import period_of
from streams.checkpoints import CheckpointStore, rebuild
from streams.sqlite_log import SqliteEventLog

TAIL = 1_000
PAGE = 10_000


async def write(log: SqliteEventLog, events: int) -> float:
    start = time.perf_counter()
    requests = (events + 2) // 3
    last = None
    for i in range(requests):
        for event in request_events(i, teams=200, keys_per_team=50):
            last = log.append(event)
        if i % 2_000 == 1_999:
            await last  # type: ignore[misc]  # keep the queue (and memory) bounded
    await log.flush()
    return time.perf_counter() - start


async def timed_fold(log: SqliteEventLog, checkpoint_at: int) -> tuple[float, float, bytes, Ledger]:
    """Fold from 0 page by page, timing read+decode and apply apart; snapshot at ``checkpoint_at``."""
    ledger, offset, read_s, apply_s, snapshot = Ledger(IST), 0, 0.0, 0.0, b""
    while True:
        t0 = time.perf_counter()
        batch = await log.read(after=offset, limit=PAGE)
        t1 = time.perf_counter()
        read_s += t1 - t0
        if not batch:
            return read_s, apply_s, snapshot, ledger
        for offset, event in batch:
            ledger.apply(event)
            if offset == checkpoint_at:
                apply_s += time.perf_counter() - t1
                snapshot = ledger.to_bytes()
                t1 = time.perf_counter()
        apply_s += time.perf_counter() - t1


async def main(events: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        log = SqliteEventLog.open(Path(tmp) / "events.db")
        wrote = await write(log, events)
        end = log.last_offset
        size_log = (Path(tmp) / "events.db").stat().st_size
        print(f"wrote {end:,} events ({end // 3:,} requests) in {wrote:.1f}s; log file {size_log / 1e6:.0f} MB")

        empty = CheckpointStore(Path(tmp) / "empty.db")
        start = time.perf_counter()
        full, last = await rebuild(log, empty, IST)
        full_s = time.perf_counter() - start
        print(f"full fold from offset 0 (rebuild, no checkpoint): {full_s:.2f}s to offset {last:,}")

        at = end - TAIL
        read_s, apply_s, snapshot, again = await timed_fold(log, at)
        assert again.to_bytes() == full.to_bytes()
        print(f"  breakdown (a second, instrumented pass): log read + decode {read_s:.2f}s, Ledger.apply {apply_s:.2f}s "
              f"({apply_s / end * 1e6:.2f} us/event)")

        t0 = time.perf_counter()
        full.to_bytes()
        to_bytes_s = time.perf_counter() - t0
        holds = len(full.open_holds())
        print(f"ledger at the end: {len(full.balances()):,} scope balances, {holds} open holds; "
              f"to_bytes {to_bytes_s * 1e3:.0f} ms")
        closed = sum(len(ids) for ids in orjson.loads(snapshot)["closed"].values())
        print(f"checkpoint at offset {at:,}: {len(snapshot) / 1e6:.1f} MB ({closed:,} closed request ids)")
        pruned = Ledger.from_bytes(snapshot)
        pruned.prune(period_of(request_events(end // 3)[0].time, IST))
        print(f"  after prune(current month): {len(pruned.to_bytes()) / 1e6:.1f} MB")

        store = CheckpointStore(Path(tmp) / "checkpoints.db")
        await store.save(at, snapshot)
        t0 = time.perf_counter()
        Ledger.from_bytes(snapshot)
        from_bytes_s = time.perf_counter() - t0
        start = time.perf_counter()
        rebuilt, last = await rebuild(log, store, IST)
        rebuild_s = time.perf_counter() - start
        assert rebuilt.to_bytes() == full.to_bytes() and last == end
        print(f"rebuild from the checkpoint + {TAIL:,} events: {rebuild_s * 1e3:.0f} ms "
              f"(from_bytes {from_bytes_s * 1e3:.0f} ms); {full_s / rebuild_s:.0f}x faster than the full fold")
        print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3:.0f} MB")
        store.close()
        empty.close()
        await log.close()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000))
