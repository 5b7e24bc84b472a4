"""Benchmark (run by hand, never a timed assertion): SqliteEventLog appends/s.

    .venv/bin/python tests/streams/bench_sqlite_log.py [N]

One asyncio task appends N events without awaiting each (the request-path
pattern), then awaits the last future; also a producer that awaits every ack
(the worst case, one event per group commit).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

from stream_events import make_event

from ledger.codec import encode
from streams.sqlite_log import SqliteEventLog


async def fire_and_forget(n: int, path: Path) -> float:
    events = [make_event(i) for i in range(n)]
    log = SqliteEventLog.open(path)
    start = time.perf_counter()
    futures = [log.append(event) for event in events]
    await asyncio.gather(*futures)
    elapsed = time.perf_counter() - start
    await log.close()
    return n / elapsed


async def paced(n: int, path: Path, per_tick: int) -> float:
    """Appends ``per_tick`` events per loop turn, like many concurrent requests."""
    events = [make_event(i) for i in range(n)]
    log = SqliteEventLog.open(path)
    start = time.perf_counter()
    last = None
    for i in range(0, n, per_tick):
        for event in events[i : i + per_tick]:
            last = log.append(event)
        await asyncio.sleep(0)
    await last  # type: ignore[misc]
    elapsed = time.perf_counter() - start
    await log.close()
    return n / elapsed


async def await_each(n: int, path: Path) -> float:
    events = [make_event(i) for i in range(n)]
    log = SqliteEventLog.open(path)
    start = time.perf_counter()
    for event in events:
        await log.append(event)
    elapsed = time.perf_counter() - start
    await log.close()
    return n / elapsed


def encode_only(n: int) -> float:
    events = [make_event(i) for i in range(n)]
    start = time.perf_counter()
    for event in events:
        encode(event)
    return n / (time.perf_counter() - start)


async def main(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print(f"encode only:                     {encode_only(n):>10,.0f} events/s")
        print(f"one task, {n} appends, no awaits: {await fire_and_forget(n, root / 'a.db'):>10,.0f} appends/s")
        print(f"one task, 100 per loop turn:     {await paced(n, root / 'b.db', 100):>10,.0f} appends/s")
        m = min(n, 2000)
        print(f"await every ack ({m}):          {await await_each(m, root / 'c.db'):>10,.0f} appends/s")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 50_000))
