"""Settling rate-limit reservations in the background: actual − reserved, never blocking the request.

Admission reserves estimates; settlement (and a refused admission's refund)
adjusts the buckets by the difference. With Redis that is a round trip, so
each adjustment runs as its own task; a failure is logged, never raised into
the request that caused it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from proxy.limits.bucket import BucketSpec
from proxy.limits.port import Buckets

log = logging.getLogger("farebox.proxy")


class LimitSettler:
    __slots__ = ("buckets", "clock", "_tasks")

    def __init__(self, buckets: Buckets, clock: Callable[[], float]) -> None:
        self.buckets = buckets
        self.clock = clock
        self._tasks: set[asyncio.Task[None]] = set()

    def adjust(self, deltas: Sequence[tuple[BucketSpec, int]]) -> None:
        """Apply ``deltas`` in the background; nothing to do for an empty list."""
        if not deltas:
            return
        task = asyncio.get_running_loop().create_task(self.buckets.adjust(deltas, int(self.clock() * 1_000_000)))
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("rate-limit settlement failed: %s", task.exception())
