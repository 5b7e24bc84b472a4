"""Helper processes that leave with their parent: no orphan outlives a ``kill -9`` of the process that started it.

Light on purpose (standard library only): the gateway imports it to start its archiver child without loading
pyarrow.
"""

from __future__ import annotations

import os
import threading
import time


def leave_with(parent_pid: int) -> None:
    """A pool process's initializer: exit as soon as the process ``parent_pid`` is gone. Whatever the process was
    doing is safe to cut short: archive files are written atomically and the archived offset is only read from
    what landed (``streams.archive.write``)."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
