"""Property: any sequence of reserve / adjust at any times (forwards, backwards, far apart)
gives the same answers and the same bucket states on MemoryBuckets and on Redis's Lua."""

from __future__ import annotations

import asyncio
import uuid

from bucket_helpers import redis_buckets
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.limits import BucketSpec, MemoryBuckets
from proxy.limits.bucket import refill

T0 = 1_700_000_000_000_000

specs = st.lists(
    st.builds(
        lambda cap, window: (cap, window),
        st.one_of(st.integers(1, 100), st.integers(1, 2_000_000)),
        st.sampled_from([1, 7, 60, 3600]),
    ),
    min_size=1,
    max_size=4,
)
steps = st.one_of(
    st.just(0),
    st.integers(-2_000_000, 2_000_000),  # small moves, clock skew backwards included
    st.integers(0, 10**10),  # up to ~3 hours of idle
)
op = st.tuples(
    st.sampled_from(["reserve", "adjust"]),
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1_000_000)), min_size=1, max_size=3),
    st.booleans(),  # adjust: refund instead of charge
    steps,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=specs, ops=st.lists(op, min_size=1, max_size=25), amount_scale=st.sampled_from([1, 1000]))
def test_memory_and_redis_agree(redis_server, specs, ops, amount_scale):
    buckets = [BucketSpec(f"b{i}", cap if cap * w < 9_000_000_000 else 100, w) for i, (cap, w) in enumerate(specs)]

    async def run() -> None:
        memory = MemoryBuckets()
        # a generous connect timeout: each example opens new connections, and on a loaded CI box
        # one took more than the 1 s default (this test is about the semantics, not the timeouts)
        shared = redis_buckets(redis_server, key_prefix=f"eq:{uuid.uuid4().hex[:8]}:", socket_timeout_s=10.0)
        try:
            now = T0
            for kind, picks, refund, step in ops:
                now = max(0, now + step)
                items = [(buckets[i % len(buckets)], amount // amount_scale) for i, amount in picks]
                if kind == "reserve":
                    assert await memory.reserve(items, now) == await shared.reserve(items, now)
                else:
                    items = [(spec, -a if refund else a) for spec, a in items]
                    await memory.adjust(items, now)
                    await shared.adjust(items, now)
                for spec in buckets:
                    mine = memory.state(spec.key)
                    theirs = await shared.state(spec.key)
                    assert (mine is None) == (theirs is None)
                    assert refill(mine, spec, now) == refill(theirs, spec, now)
            assert shared.metrics["redis_fallback_total"] == 0
        finally:
            await shared.close()

    asyncio.run(run())
