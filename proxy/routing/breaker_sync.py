"""The Redis adapter that shares circuit-breaker transitions between pods (distributed mode).

Thin around ``shared_breakers`` (the decisions) and never on the request path:
requests read and write only the pod's in-memory ``RoutingState``; two
background loops talk to Redis.

* **tell** (every ``interval_s``): this pod's own transitions since the last
  look (``shared_breakers.outgoing``). An open is written to
  ``<prefix><deployment>`` (the notice, expiring when the open ends) and
  published on ``channel``; a close deletes the key and is published.
  Redis down: the newest notice per deployment waits and is retried; an open
  whose end has passed is dropped.
* **hear**: subscribed to ``channel``; each notice from another pod goes into
  the local breaker (``shared_breakers.apply``; an open ends ``probe_grace_s``
  later here, so the pod that opened it probes first). After every (re)subscribe the
  keys of the snapshot's deployments are read once, so a pod that starts, or
  comes back after a Redis outage, learns the opens it missed.

Redis unreachable: local breakers work exactly as in embedded mode; the loops
log once and reconnect every ``retry_s``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Mapping

import redis.asyncio as aioredis

from proxy.cancellation import stop_if_cancelled
from proxy.routing import shared_breakers
from proxy.routing.breaker import OPEN
from proxy.routing.shared_breakers import Notice
from proxy.routing.state import RoutingState
from proxy.snapshot import Deployment

log = logging.getLogger("farebox.routing")

CHANNEL = "fb:breakers"
PREFIX = "fb:breaker:"


class BreakerSync:
    def __init__(self, redis_url: str, routing: RoutingState, deployments: Callable[[], Mapping[str, Deployment]],
                 pod: str, *, interval_s: float = 0.1, retry_s: float = 0.5, channel: str = CHANNEL,
                 prefix: str = PREFIX, wall: Callable[[], float] = time.time, probe_grace_s: float = 0.0) -> None:
        self.redis = aioredis.Redis.from_url(redis_url, socket_connect_timeout=1.0)
        self.routing, self.deployments, self.pod = routing, deployments, pod
        self.interval_s, self.retry_s = interval_s, retry_s
        self.probe_grace_s = probe_grace_s  # other pods' opens end this much later here: their opener probes first
        self.channel, self.prefix, self.wall = channel, prefix, wall
        self.told: dict[str, int] = {}  # deployment -> Breaker.changes already told
        self.pending: dict[str, Notice] = {}  # told locally, not yet written to Redis
        self.sent = self.applied = 0  # notices written / applied from other pods
        self._tasks: list[asyncio.Task[None]] = []
        self._redis_ok = True

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._tell_loop(), name="breakers-tell"),
                       asyncio.create_task(self._hear_loop(), name="breakers-hear")]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        try:  # a listener stuck in a Redis read must not hold the pod's shutdown
            await asyncio.wait_for(asyncio.gather(*self._tasks, return_exceptions=True), 5.0)
        except TimeoutError:
            log.warning("breaker sharing: listeners did not stop within 5s; left to the process exit")
        self._tasks = []
        try:  # a last chance for transitions of the final moments, bounded: shutdown must not wait on Redis
            await asyncio.wait_for(self.tell_once(), 1.0)
        except Exception:  # noqa: BLE001 - shutting down: local state goes with the pod anyway
            log.debug("breaker sharing: final tell failed", exc_info=True)
        await self.redis.aclose()

    # -- tell --------------------------------------------------------------------------

    async def tell_once(self) -> int:
        """Write this pod's new transitions to Redis; returns how many were written."""
        now_wall, now_local = self.wall(), self.routing.clock()
        for notice in shared_breakers.outgoing(self.routing.breakers, self.told, self.pod, now_wall, now_local):
            self.pending[notice.deployment] = notice
        for dep_id, notice in list(self.pending.items()):
            if notice.state == OPEN and notice.until <= now_wall:
                del self.pending[dep_id]  # over before Redis heard of it
        written = 0
        for dep_id, notice in list(self.pending.items()):
            async with self.redis.pipeline(transaction=True) as pipe:
                if notice.state == OPEN:
                    pipe.set(self.prefix + dep_id, notice.encode(), px=notice.ttl_ms())
                else:
                    pipe.delete(self.prefix + dep_id)
                pipe.publish(self.channel, notice.encode())
                await asyncio.wait_for(pipe.execute(), 2.0)
            if self.pending.get(dep_id) is notice:
                del self.pending[dep_id]
            written += 1
            self.sent += 1
            log.info("breaker of %s told to the other pods: %s", dep_id, shared_breakers.describe(notice))
        return written

    async def _tell_loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.tell_once()
                stop_if_cancelled()  # redis-py may swallow a cancel (proxy/cancellation.py)
                self._up()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - Redis away: keep the notices, retry
                stop_if_cancelled()
                self._down(exc)
                await asyncio.sleep(self.retry_s)

    # -- hear --------------------------------------------------------------------------

    def hear(self, raw: bytes | str) -> bool:
        """Apply one notice from Redis; True if the local breaker changed."""
        notice = shared_breakers.decode(raw)
        if notice is None or notice.pod == self.pod:
            return False
        dep = self.deployments().get(notice.deployment)
        if dep is None:  # not in this pod's snapshot (yet): nothing routes to it here
            return False
        changed = shared_breakers.apply(self.routing.breaker(dep), notice, self.pod, self.wall(),
                                        self.routing.clock(), self.probe_grace_s)
        if changed:
            self.applied += 1
            log.warning("circuit of deployment %s %s by pod %s", notice.deployment,
                        "opened" if notice.state == OPEN else "closed", notice.pod)
        return changed

    async def load(self) -> int:
        """Apply the opens currently recorded for the snapshot's deployments; returns how many changed."""
        ids = sorted(self.deployments())
        if not ids:
            return 0
        values = await asyncio.wait_for(self.redis.mget([self.prefix + d for d in ids]), 2.0)
        return sum(1 for raw in values if raw is not None and self.hear(raw))

    async def _hear_loop(self) -> None:
        while True:
            try:
                async with self.redis.pubsub() as pubsub:
                    await pubsub.subscribe(self.channel)
                    await self.load()  # after subscribing: nothing falls between the two
                    stop_if_cancelled()
                    self._up()
                    while True:  # get_message, not listen(): see proxy/cancellation.py
                        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                        stop_if_cancelled()
                        if message and message.get("type") == "message":
                            self.hear(message["data"])
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - Redis away: local breakers carry on
                stop_if_cancelled()
                self._down(exc)
                await asyncio.sleep(self.retry_s)

    def _down(self, exc: Exception) -> None:
        if self._redis_ok:
            log.warning("breaker sharing lost Redis (%s); breakers are per pod until it is back",
                        type(exc).__name__)
        self._redis_ok = False

    def _up(self) -> None:
        if not self._redis_ok:
            log.info("breaker sharing reconnected to Redis")
        self._redis_ok = True

    def status(self) -> dict[str, Any]:
        return {"redis": "ok" if self._redis_ok else "unreachable", "told": self.sent, "applied": self.applied,
                "pending": len(self.pending)}


def sync_ctx(redis_url: str, routing: RoutingState, deployments: Callable[[], Mapping[str, Deployment]],
             pod: str, probe_grace_s: float = 0.0) -> Callable[[Any], Any]:
    """An aiohttp ``cleanup_ctx`` running a ``BreakerSync`` for the app's lifetime."""

    async def ctx(app: Any) -> Any:
        sync = BreakerSync(redis_url, routing, deployments, pod, probe_grace_s=probe_grace_s)
        sync.start()
        yield
        await sync.close()

    return ctx
