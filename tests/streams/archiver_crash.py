"""Subprocess for the archive crash test: archive one batch, then die between write and commit.

usage: python archiver_crash.py BOOTSTRAP TOPIC ROOT GROUP
"""

import asyncio
import os
import sys

from streams.archive import KafkaArchiver


def crash() -> None:
    os._exit(1)  # files durable, offsets not committed, journal still there


if __name__ == "__main__":
    bootstrap, topic, root, group = sys.argv[1:5]
    archiver = KafkaArchiver(bootstrap, topic, root, group_id=group, batch_size=250, between_write_and_commit=crash)
    asyncio.run(archiver.run(until_caught_up=True))
    sys.exit(3)  # never reached: the first batch crashes
