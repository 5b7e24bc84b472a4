"""Subprocess for the checkpoint crash test: append, read back, fold, checkpoint, forever.

usage: python checkpoint_writer.py DIR   -> until SIGKILLed by the parent

It follows the flush order of ``streams.checkpoints``: only events read back
from the log (acknowledged) are folded, and checkpoints are taken at the
offset of the last event folded.
"""

import asyncio
import sys
from pathlib import Path

from checkpoint_events import IST, request_events

from ledger.balances import Ledger
from streams.checkpoints import Checkpointer, CheckpointStore
from streams.sqlite_log import SqliteEventLog


async def main(directory: Path) -> None:
    log = SqliteEventLog.open(directory / "events.db")
    store = CheckpointStore(directory / "checkpoints.db")
    checkpointer = Checkpointer(store, every_events=90, every_seconds=3600)
    ledger, offset = Ledger(IST), 0
    print("started", flush=True)
    i = 0
    while True:
        for _ in range(20):
            for event in request_events(i):
                log.append(event)
            i += 1
        await asyncio.sleep(0.001)
        for at, event in await log.read(after=offset, limit=1_000):
            ledger.apply(event)
            offset = at
            if await checkpointer.observe(offset, ledger):
                print("saved", offset, flush=True)


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
