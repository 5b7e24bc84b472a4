"""The provider-limit mirrors, lowered to what the provider says is left.

A deployment's mirrors (``draws.mirror_specs``) count what farebox itself sends; a provider key shared with
other gateways, other pods or other systems is drained by them too. Providers say what is left on every
answer (Azure's and OpenAI's ``x-ratelimit-remaining-*``, Anthropic's ``anthropic-ratelimit-*-remaining``:
read by ``proxy.upstream.limit_headers``); ``MirrorSync.observe`` takes those numbers and lowers each mirror
to ``remaining - (limit - mirror capacity)``, the same headroom below the provider's count as the mirror
keeps below its limit, so farebox stops before the provider says 429. A mirror is only ever lowered (what
farebox holds back is never given away on a provider's word), at most once a second per deployment (each
sync is a read and a write of the buckets: a Redis round trip each), in the background: the answer that
carried the headers never waits for it. The read and the write are two steps: a request drawing in between
is counted again, which errs on the side of waiting.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from proxy.limits.draws import mirror_specs
from proxy.limits.port import Buckets
from proxy.snapshot import Deployment

log = logging.getLogger("farebox.proxy")
SYNC_EVERY_S = 1.0


class MirrorSync:
    __slots__ = ("buckets", "clock", "pct", "_last", "_tasks")

    def __init__(self, buckets: Buckets, clock: Callable[[], float], pct: Callable[[], int]) -> None:
        self.buckets = buckets
        self.clock = clock  # wall seconds (the buckets' time)
        self.pct = pct  # the snapshot's deployment_mirror_pct, read when a sync runs
        self._last: dict[str, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def observe(self, dep: Deployment, remaining: Mapping[str, int]) -> None:
        """Lower ``dep``'s mirrors to ``remaining`` (mirror name -> what the provider says is left), in the
        background; at most once per ``SYNC_EVERY_S`` per deployment."""
        if not remaining:
            return
        now = self.clock()
        if now - self._last.get(dep.id, -SYNC_EVERY_S) < SYNC_EVERY_S:
            return
        self._last[dep.id] = now
        task = asyncio.get_running_loop().create_task(self._lower(dep, dict(remaining), int(now * 1_000_000)))
        self._tasks.add(task)
        task.add_done_callback(self._done)

    async def _lower(self, dep: Deployment, remaining: dict[str, int], now_us: int) -> None:
        for name, spec, per_min in mirror_specs(dep, self.pct()):
            left = remaining.get(name)
            if left is None:
                continue
            target = left - (per_min - spec.capacity)
            level = await self.buckets.peek(spec, now_us)
            if target < level:
                await self.buckets.adjust([(spec, level - target)], now_us)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("lowering a provider-limit mirror failed: %s", task.exception())
