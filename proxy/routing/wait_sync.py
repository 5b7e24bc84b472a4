"""The Redis adapter that makes an alias's capacity wait rooms one room across pods (distributed mode).

In distributed mode the capacity requests wait for (provider-limit mirrors, fleet slots) is shared through
Redis, so the rule that teams take it in turn (``proxy.routing.fair_wait``) must count every pod's waiters:
otherwise a team's fifty requests spread over three pods take three turns to another team's one. Requests
never talk to Redis here: they read their room in memory; one background loop per pod does the rest.

* Every ``interval_s`` (50 ms), and when a waiter joins or leaves here (at most every 10 ms), the loop reads the other pods' entries; their sum, per alias and team, becomes
  each room's ``remote`` view (``WaitRoom.set_remote``, which wakes the waiters when it changed). It reads while
  nobody waits here too, so a request that starts waiting joins with a view at most that old: a team new to
  the episode starts level with the least served anywhere, not ahead of them. While requests wait here, it
  also writes this pod's rooms (each alias's waiting teams, their requests waiting, turns taken here and oldest
  wait: ``WaitRoom.summary``) to ``<prefix><pod>``, expiring after ``ttl_s``, and adds the pod to ``<prefix>pods``;
  when nobody waits here any more the entry is deleted at once. Two or three commands per pod each interval.
* A pod that dies leaves its entry for at most ``ttl_s`` (0.5 s): meanwhile the others may yield to its
  teams, then the entry expires and the pod is dropped from the set.
* Redis unreachable (or slow beyond ``timeout_s``): the remote views are emptied, so each pod's room is fair
  on its own, as in one process; the loop logs once and retries every ``retry_s``.

The entry is JSON: ``{"alias": {"team": [waiting, turns, oldest start (epoch seconds)], ...}, ...}``; an entry that does not parse is
ignored (another version's, or garbage).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Iterable, Mapping

import orjson
import redis.asyncio as aioredis

from proxy.cancellation import stop_if_cancelled
from proxy.routing.fair_wait import Remote, WaitRoom
from proxy.routing.state import RoutingState

log = logging.getLogger("farebox.routing")

PREFIX = "fb:wait:"
MIN_GAP_S = 0.01  # at most 100 syncs a second per pod however fast waiters come and go
View = dict[str, Remote]  # alias -> team -> (requests waiting, turns taken, oldest wait's start)


def encode(rooms: Mapping[str, WaitRoom]) -> bytes | None:
    """This pod's entry: every alias with a request waiting here; None when nobody waits."""
    body = {alias: {t: list(v) for t, v in room.summary().items()} for alias, room in rooms.items() if room.waiting}
    return orjson.dumps(body) if body else None


def decode(raw: bytes | str | None) -> View | None:
    """Another pod's entry, or None if it is absent or not one."""
    if raw is None:
        return None
    try:
        body = orjson.loads(raw)
        return {str(alias): {str(t): (int(v[0]), int(v[1]), float(v[2])) for t, v in teams.items()}
                for alias, teams in body.items()}
    except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError, IndexError, KeyError):
        return None


def merge(views: Iterable[View]) -> View:
    """The other pods' entries summed per alias and team."""
    out: View = {}
    for view in views:
        for alias, teams in view.items():
            mine = out.setdefault(alias, {})
            for team, (waiting, served, since) in teams.items():
                w, s, oldest = mine.get(team, (0, 0, since))
                mine[team] = (w + waiting, s + served, min(oldest, since))
    return out


class WaitSync:
    def __init__(self, redis_url: str, routing: RoutingState, pod: str, *, interval_s: float = 0.05,
                 ttl_s: float = 0.5, timeout_s: float = 0.25, retry_s: float = 0.5, prefix: str = PREFIX) -> None:
        self.redis = aioredis.Redis.from_url(redis_url, socket_connect_timeout=1.0)
        self.routing, self.pod, self.prefix = routing, pod, prefix
        self.interval_s, self.ttl_s, self.timeout_s, self.retry_s = interval_s, ttl_s, timeout_s, retry_s
        self.published = False  # this pod's entry is in Redis
        self.syncs = 0
        self._redis_ok = True
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._kicked = asyncio.Event()
        routing.wait_changed = self._kicked.set  # a join or leave is published at once, not at the next tick

    @property
    def pods_key(self) -> str:
        return self.prefix + "pods"

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="wait-rooms-sync")

    async def close(self) -> None:
        self._stopping = True  # a cancel that asyncio.wait_for swallows still ends the loop at its next turn
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        try:  # the others stop yielding to this pod's teams now rather than at the entry's expiry
            if self.published:
                await asyncio.wait_for(self.redis.delete(self.prefix + self.pod), 1.0)
        except Exception:  # noqa: BLE001 - shutting down: the entry expires by itself
            log.debug("wait rooms: final delete failed", exc_info=True)
        await self.redis.aclose()

    async def sync_once(self) -> None:
        """Publish this pod's rooms (or delete the entry), read the other pods', apply them."""
        entry = encode(self.routing.waits)
        async with self.redis.pipeline(transaction=False) as pipe:
            if entry is not None:
                pipe.set(self.prefix + self.pod, entry, px=max(int(self.ttl_s * 1000), 1))
                pipe.sadd(self.pods_key, self.pod)
            elif self.published:
                pipe.delete(self.prefix + self.pod)
            pipe.smembers(self.pods_key)
            *_, members = await pipe.execute()
        self.published = entry is not None
        others = sorted(m.decode() if isinstance(m, bytes) else str(m) for m in members)
        others = [p for p in others if p != self.pod]
        views: list[View] = []
        if others:
            raws = await self.redis.mget([self.prefix + p for p in others])
            gone = [p for p, raw in zip(others, raws) if raw is None]
            if gone:  # expired: that pod stopped waiting long ago or died
                await self.redis.srem(self.pods_key, *gone)
            views = [v for v in map(decode, raws) if v is not None]
        self._apply(merge(views))
        self.syncs += 1

    def _apply(self, remote: View) -> None:
        self.routing.remote_waits = remote
        for alias, room in self.routing.waits.items():
            room.set_remote(remote.get(alias, {}))

    async def _loop(self) -> None:
        while not self._stopping:
            try:
                self._kicked.clear()
                await asyncio.wait_for(self.sync_once(), self.timeout_s)
                if not self._redis_ok:
                    log.info("wait rooms: Redis reachable again; teams wait in turn across pods")
                    self._redis_ok = True
                await asyncio.sleep(MIN_GAP_S)  # joins and leaves in a burst are told together
                try:
                    await asyncio.wait_for(self._kicked.wait(), max(self.interval_s - MIN_GAP_S, 0.0))
                except TimeoutError:
                    pass
            except Exception as exc:  # noqa: BLE001 - Redis down or slow: each pod's room is fair on its own
                stop_if_cancelled()
                self._apply({})
                if self._redis_ok:
                    log.warning("wait rooms: Redis unreachable (%s); each pod's waiters take turns among "
                                "themselves until it is back", exc)
                    self._redis_ok = False
                await asyncio.sleep(self.retry_s)

    def status(self) -> dict[str, Any]:
        return {"redis": "ok" if self._redis_ok else "unreachable", "syncs": self.syncs,
                "remote": {a: len(t) for a, t in self.routing.remote_waits.items()}}


def sync_ctx(redis_url: str, routing: RoutingState, pod: str) -> Callable[[Any], Any]:
    """An aiohttp ``cleanup_ctx`` running a ``WaitSync`` for the app's lifetime."""

    async def ctx(app: Any) -> Any:
        sync = WaitSync(redis_url, routing, pod)
        sync.start()
        yield
        await sync.close()

    return ctx
