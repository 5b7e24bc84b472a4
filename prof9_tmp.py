import asyncio, time, tempfile
from pathlib import Path
from tests.bench.finance.measure import real_events
from streams.sqlite_log import SqliteEventLog
from streams.archive_write import ArchiveWriter, _archive_log
from streams.archive_pool import DecodePool
async def main():
    evs = real_events(20000)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "l.sqlite"
        log = SqliteEventLog.open(path)
        for e in evs: log.append(e)
        await log.close()
        r = SqliteEventLog.open(path, readonly=True)
        pools = {0: None, 1: DecodePool(1), 2: DecodePool(2)}
        for p in pools.values():
            if p: p.start()
        for k in (0, 1, 2, 0, 1, 2):
            root = Path(d) / f"a-{k}-{time.time()}"
            t = time.perf_counter()
            got = await _archive_log(r, ArchiveWriter(root, "log", pools[k]), None, 5000, None)
            print(k, got, round(got / (time.perf_counter() - t)))
        await r.close()
if __name__ == "__main__":
    asyncio.run(main())
