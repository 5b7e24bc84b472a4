"""Subprocess for the crash tests: append forever, print each id once acknowledged.

usage: python crash_writer.py PATH exit-after N   -> os._exit(1) after N acks
       python crash_writer.py PATH run            -> until SIGKILLed by the parent
"""

import asyncio
import os
import sys

from stream_events import make_event

from streams.sqlite_log import SqliteEventLog


async def main(path: str, mode: str, limit: int) -> None:
    log = SqliteEventLog.open(path)
    acked = 0

    def on_ack(future: asyncio.Future, event_id: str) -> None:
        nonlocal acked
        if future.exception() is None:
            print(event_id, flush=True)  # printed only after the future resolved
            acked += 1
            if mode == "exit-after" and acked >= limit:
                os._exit(1)  # no close(), no flush: a crash with appends in flight

    i = 0
    while True:
        for _ in range(50):
            event = make_event(i)
            log.append(event).add_done_callback(lambda f, eid=event.id: on_ack(f, eid))
            i += 1
        await asyncio.sleep(0.001)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 0))
