"""Subprocess for the archive crash test: archive one batch, then die between write and commit.

usage: python archiver_crash.py BOOTSTRAP TOPIC ROOT GROUP [BATCH [DECODE_PROCESSES]]

With decode processes and a backlog, the next batch is being read and decoded when it dies.
"""

import asyncio
import os
import sys

from streams.archive.kafka_source import KafkaArchiver
from streams.archive.pool import DecodePool


def crash() -> None:
    os._exit(1)  # files durable, offsets not committed, journal still there


if __name__ == "__main__":
    bootstrap, topic, root, group = sys.argv[1:5]
    batch, processes = (int(a) for a in (sys.argv[5:7] + ["250", "0"][len(sys.argv[5:7]):]))
    pool = DecodePool(processes) if processes else None
    archiver = KafkaArchiver(bootstrap, topic, root, group_id=group, batch_size=batch, between_write_and_commit=crash,
                             pool=pool)
    asyncio.run(archiver.run(until_caught_up=True))
    sys.exit(3)  # never reached: the first batch crashes
