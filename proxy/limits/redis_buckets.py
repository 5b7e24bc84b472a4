"""Token buckets shared through Redis (distributed mode), with a local fallback.

Each bucket is a hash ``{prefix}{key}`` with fields ``l`` (level, milli-units),
``r`` (refill remainder) and ``t`` (last time, us), written only by two Lua
scripts that transcribe ``bucket.refill`` exactly (integers below 2**53, which
Lua's doubles hold exactly; numbers are written with ``%.0f`` because Lua's own
number-to-string keeps only 14 digits). ``RESERVE`` refills and checks every
bucket, then takes all amounts or none, in one atomic step across all keys;
``ADJUST`` applies settlement deltas. Scripts run by EVALSHA (the sha is
computed locally) and are loaded on NOSCRIPT. ``peek`` is a plain HMGET plus
the pure refill. Every write sets a TTL of "time until full + ``ttl_windows``
windows", after which the state is indistinguishable from a fresh, full
bucket, so idle keys vanish without changing any answer.

All keys of one ``reserve`` go to one script call, so they must live on one
Redis primary (no Cluster slot-spreading: use a single primary, or hash tags
that put a request's buckets on one slot).

Clock skew across pods: time is the caller's ``now_us`` (deterministic tests).
A bucket's clock is the maximum ``now_us`` any pod has written, and refill
never runs backwards, so a pod whose clock lags by ``d`` sees no refill until
it catches up (it under-admits), and a pod ahead by ``d`` can add at most
``d`` worth of refill once. With NTP (skew in ms) this is far inside the
~5% the limits promise; if pods can drift by seconds, pass Redis time instead.

Calls go through ``redis_pipe.RedisPipe``: the calls of one loop tick share
one pipelined write, and the ``timeout_s`` (5 ms by default) runs from that
write; a reply already waiting in our socket when it runs out still counts.
So it measures Redis and the network, not time spent queued in our own busy
event loop. redis-py's client is kept for inspection (``state``) and tests.

Fallback: on a timeout or connection error the call is answered by a local
``MemoryBuckets`` holding ``capacity // pods`` per bucket (so N pods together
stay near the limit), one warning is logged for the transition (not per
request), and ``metrics`` counts it. After a backoff (doubling up to
``max_backoff_s``) one call at a time probes Redis; when it answers, the
adapter goes back (another single log line). Consumption while local is not
copied back: rate limits are approximate by design. A script whose reply came
too late has still run on the server, charging the bucket twice: the error is
on the safe side.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.connection import SSLConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from proxy.limits import bucket
from proxy.limits.bucket import BucketSpec, BucketState, Decision
from proxy.limits.errors import BackendError
from proxy.limits.memory import MemoryBuckets
from proxy.limits.port import Reservation
from proxy.limits.redis_pipe import Address, RedisPipe

log = logging.getLogger("proxy.limits")

T = TypeVar("T")

# Shared Lua: load a state (missing = full) and refill it exactly as bucket.refill does.
_PRELUDE = """
local function refill(level, rem, t, now, c, w)
  local cap = c * 1000
  local t2 = math.max(t, now)
  if level >= cap then return cap, 0, t2 end
  local wus = w * 1000000
  local e = t2 - t
  local elapsed = math.fmod(e, wus)
  local windows = (e - elapsed) / wus
  if windows > 0 then
    local d = cap - level
    local dw = (d - math.fmod(d, cap)) / cap
    if math.fmod(d, cap) > 0 then dw = dw + 1 end
    if windows >= dw then return cap, 0, t2 end
    level = level + windows * cap
  end
  local num = elapsed * c + rem
  local den = w * 1000
  local r = math.fmod(num, den)
  level = level + (num - r) / den
  if level >= cap then return cap, 0, t2 end
  return level, r, t2
end

local function load(key, c, w, now)
  local v = redis.call('HMGET', key, 'l', 'r', 't')
  if not v[1] then return c * 1000, 0, now end
  return refill(tonumber(v[1]), tonumber(v[2]), tonumber(v[3]), now, c, w)
end

local function store(key, level, rem, t, c, w, slack)
  redis.call('HSET', key, 'l', string.format('%.0f', level), 'r', string.format('%.0f', rem),
             't', string.format('%.0f', t))
  local ms = slack * w * 1000
  if level < c * 1000 then
    ms = ms + math.ceil(((c * 1000 - level) * w * 1000 - rem) / c / 1000)
  end
  redis.call('PEXPIRE', key, ms)
end

local now = tonumber(ARGV[1])
local slack = tonumber(ARGV[2])
"""

# KEYS: buckets. ARGV: now_us, ttl_windows, then (capacity, window_s, amount) per key.
# Returns {failed (1-based, 0 = taken), level1, rem1, t1, level2, ...}.
RESERVE = _PRELUDE + """
local L, R, T = {}, {}, {}
local failed = 0
for i = 1, #KEYS do
  local c, w, a = tonumber(ARGV[3*i]), tonumber(ARGV[3*i+1]), tonumber(ARGV[3*i+2])
  L[i], R[i], T[i] = load(KEYS[i], c, w, now)
  if failed == 0 and L[i] < a * 1000 then failed = i end
end
local out = {failed}
for i = 1, #KEYS do
  if failed == 0 then
    local c, w, a = tonumber(ARGV[3*i]), tonumber(ARGV[3*i+1]), tonumber(ARGV[3*i+2])
    L[i] = L[i] - a * 1000
    store(KEYS[i], L[i], R[i], T[i], c, w, slack)
  end
  out[#out+1] = L[i]; out[#out+1] = R[i]; out[#out+1] = T[i]
end
return out
"""

# KEYS: buckets. ARGV: now_us, ttl_windows, then (capacity, window_s, delta) per key.
ADJUST = _PRELUDE + """
for i = 1, #KEYS do
  local c, w, d = tonumber(ARGV[3*i]), tonumber(ARGV[3*i+1]), tonumber(ARGV[3*i+2])
  local l, r, t = load(KEYS[i], c, w, now)
  l = l - d * 1000
  if l >= c * 1000 then l = c * 1000; r = 0 end
  store(KEYS[i], l, r, t, c, w, slack)
end
return 0
"""

_SHA = {script: hashlib.sha1(script.encode()).hexdigest() for script in (RESERVE, ADJUST)}

# What sends a call to the local buckets (anything else from Redis is a BackendError).
_UNREACHABLE = (TimeoutError, RedisConnectionError, RedisTimeoutError, OSError)


def address_of(client: aioredis.Redis) -> Address:
    """Where ``client`` connects (host and port or unix socket, db, credentials, TLS).

    For a ``rediss://`` client the TLS context is the one redis-py builds from the same
    ``ssl_*`` options (``ssl_cert_reqs=none``, ``ssl_ca_certs=...``, ``ssl_check_hostname``...),
    so the pipe verifies the server exactly as the inspection client does."""
    pool = client.connection_pool
    kw = pool.connection_kwargs
    tls = None
    if issubclass(pool.connection_class, SSLConnection):
        tls = pool.make_connection().ssl_context.get()  # an unconnected connection: no I/O
    return Address(host=kw.get("host", "127.0.0.1"), port=int(kw.get("port", 6379)), path=kw.get("path"),
                   db=int(kw.get("db") or 0), username=kw.get("username"), password=kw.get("password"), tls=tls)


class RedisBuckets:
    """``Buckets`` over one Redis primary; answers locally (limit // pods) when Redis does not."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        pods: int,
        timeout_s: float = 0.005,
        key_prefix: str = "fb:rl:",
        ttl_windows: int = 1,
        backoff_s: float = 0.05,
        max_backoff_s: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
        owns_client: bool = False,
        stale_s: float = 1.0,
    ) -> None:
        if pods < 1:
            raise ValueError(f"pods must be >= 1, got {pods}")
        self._client = client
        self._owns_client = owns_client
        self._pipe = RedisPipe(address_of(client), timeout_s=timeout_s, scripts=(RESERVE, ADJUST),
                               connect_timeout_s=stale_s, stale_s=stale_s)
        self.pods = pods
        self.key_prefix = key_prefix
        self._ttl_windows = ttl_windows
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self._monotonic = monotonic
        self.local = MemoryBuckets(ttl_windows=ttl_windows)
        self._local_specs: dict[BucketSpec, BucketSpec] = {}
        self._down_since: float | None = None  # None: mode "redis"
        self._retry_at = 0.0
        self._backoff = backoff_s
        self._probing = False
        self.metrics: dict[str, Any] = {
            "mode": "redis",
            "redis_fallback_total": 0,  # calls answered by the local buckets
            "redis_errors_total": 0,  # timeouts and connection errors
            "redis_outages_total": 0,  # transitions redis -> local
        }

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        pods: int,
        max_connections: int = 64,
        socket_timeout_s: float = 1.0,
        **kw: Any,
    ) -> RedisBuckets:
        """A client of its own (closed by ``close``) for inspection, and the pipe to the same
        Redis; ``socket_timeout_s`` bounds connecting and how long a call may stay unanswered
        before the connection is dropped and made again."""
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=socket_timeout_s,
            retry=Retry(NoBackoff(), 0),
            socket_timeout=socket_timeout_s,
            socket_connect_timeout=socket_timeout_s,
        )
        return cls(aioredis.Redis.from_pool(pool), pods=pods, owns_client=True, stale_s=socket_timeout_s, **kw)

    @property
    def client(self) -> aioredis.Redis:
        return self._client

    @property
    def timeout_s(self) -> float:
        return self._pipe.timeout_s

    @property
    def pipe(self) -> RedisPipe:
        return self._pipe

    def redis_key(self, key: str) -> str:
        return self.key_prefix + key

    async def start(self, timeout_s: float = 1.0) -> None:
        """Open a connection and load the scripts before traffic, so the first request does
        not pay for them inside its 5 ms. If Redis does not answer, start in local mode."""
        async def warm() -> None:
            await self._pipe.call("PING", timeout_s=timeout_s)  # after the setup, which loads them

        await self._shared_or_local(warm, lambda: None)

    # -- the port -----------------------------------------------------------------------

    async def reserve(self, items: Sequence[tuple[BucketSpec, int]], now_us: int) -> Reservation:
        merged = bucket.validated(items, now_us, reserving=True)
        if not merged:
            return Reservation(ok=True)

        async def shared() -> Reservation:
            reply = await self._eval(RESERVE, merged, now_us)
            states = tuple(
                BucketState(int(reply[i]), int(reply[i + 1]), int(reply[i + 2]))
                for i in range(1, len(reply), 3)
            )
            failed = int(reply[0])
            return Reservation.decided(merged, Decision(states, failed - 1 if failed else None))

        return await self._shared_or_local(
            shared, lambda: self.local.reserve_now(self._scaled(merged), now_us)
        )

    async def adjust(self, items: Sequence[tuple[BucketSpec, int]], now_us: int) -> None:
        merged = bucket.validated(items, now_us, reserving=False)
        if not merged:
            return

        async def shared() -> None:
            await self._eval(ADJUST, merged, now_us)

        await self._shared_or_local(shared, lambda: self.local.adjust_now(self._scaled(merged), now_us))

    async def peek(self, spec: BucketSpec, now_us: int) -> int:
        bucket.check_time(now_us)

        async def shared() -> int:
            level, rem, t = await self._pipe.call("HMGET", self.redis_key(spec.key), "l", "r", "t")
            state = None if level is None or rem is None or t is None else BucketState(int(level), int(rem), int(t))
            return bucket.units(bucket.refill(state, spec, now_us))

        return await self._shared_or_local(shared, lambda: self.local.peek_now(self._scaled_one(spec), now_us))

    async def close(self) -> None:
        await self._pipe.close()
        await self.local.close()
        if self._owns_client:
            await self._client.aclose()

    async def state(self, key: str) -> BucketState | None:
        """The stored state of ``key`` (no timeout, no fallback: for inspection and tests)."""
        level, rem, t = await self._client.hmget(self.redis_key(key), ["l", "r", "t"])
        if level is None or rem is None or t is None:
            return None
        return BucketState(int(level), int(rem), int(t))

    # -- Redis calls, timeout and fallback ---------------------------------------------

    async def _eval(self, script: str, items: list[tuple[BucketSpec, int]], now_us: int) -> Any:
        keys = [self.redis_key(spec.key) for spec, _ in items]
        args: list[int] = [now_us, self._ttl_windows]
        for spec, amount in items:
            args += [spec.capacity, spec.window_s, amount]
        return await self._pipe.evalsha(_SHA[script], keys, args)

    async def _shared_or_local(self, shared: Callable[[], Awaitable[T]], local: Callable[[], T]) -> T:
        probing = False
        if self._down_since is not None:
            if self._probing or self._monotonic() < self._retry_at:
                self.metrics["redis_fallback_total"] += 1
                return local()
            probing = self._probing = True
        try:
            result = await shared()
        except _UNREACHABLE as exc:
            self.metrics["redis_errors_total"] += 1
            self._went_down(exc, probing)
            self.metrics["redis_fallback_total"] += 1
            return local()
        except RedisError as exc:
            raise BackendError(f"Redis rejected a rate-limit script: {exc}") from exc
        finally:
            if probing:
                self._probing = False
        if probing:
            self._came_back()
        return result

    def _went_down(self, exc: BaseException, probing: bool) -> None:
        now = self._monotonic()
        if self._down_since is None:
            self._down_since = now
            self._backoff = self._backoff_s
            self._retry_at = now + self._backoff
            self.metrics["mode"] = "local"
            self.metrics["redis_outages_total"] += 1
            log.warning(
                "rate limits: Redis unreachable (%s: %s); answering from local buckets at "
                "limit/%d per pod until it answers again",
                type(exc).__name__, str(exc) or "no answer", self.pods,
            )
        elif probing:
            self._backoff = min(self._backoff * 2, self._max_backoff_s)
            self._retry_at = now + self._backoff

    def _came_back(self) -> None:
        assert self._down_since is not None
        log.warning(
            "rate limits: Redis answers again after %.1f s down; back to shared buckets "
            "(%d calls answered locally so far)",
            self._monotonic() - self._down_since, self.metrics["redis_fallback_total"],
        )
        self._down_since = None
        self.metrics["mode"] = "redis"

    def _scaled(self, items: list[tuple[BucketSpec, int]]) -> list[tuple[BucketSpec, int]]:
        return [(self._scaled_one(spec), amount) for spec, amount in items]

    def _scaled_one(self, spec: BucketSpec) -> BucketSpec:
        local = self._local_specs.get(spec)
        if local is None:
            if len(self._local_specs) > 100_000:  # specs come from config; bound it anyway
                self._local_specs.clear()
            local = BucketSpec(spec.key, max(1, spec.capacity // self.pods), spec.window_s)
            self._local_specs[spec] = local
        return local
