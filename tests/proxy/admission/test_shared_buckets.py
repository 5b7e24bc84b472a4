"""``MemoryBuckets(share=N)`` (each of ``serve --workers N``'s processes): every answer and state is that of
plain buckets whose capacities are ``capacity // N`` (at least 1), so N processes admit about the limit."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.limits import BucketSpec, MemoryBuckets

T0 = 1_700_000_000_000_000

op = st.tuples(st.sampled_from(["reserve", "adjust", "peek"]), st.integers(0, 2), st.integers(-500, 5_000),
               st.integers(0, 30_000_000))


@settings(max_examples=100, deadline=None)
@given(share=st.integers(1, 5), caps=st.lists(st.integers(1, 10_000), min_size=3, max_size=3),
       ops=st.lists(op, min_size=1, max_size=30))
def test_a_share_is_plain_buckets_at_capacity_over_share(share, caps, ops):
    specs = [BucketSpec(f"b{i}", cap, 60) for i, cap in enumerate(caps)]
    parts = [BucketSpec(s.key, max(1, s.capacity // share), s.window_s) for s in specs]

    async def run() -> None:
        shared, plain = MemoryBuckets(share=share), MemoryBuckets()
        now = T0
        for kind, i, amount, step in ops:
            now += step
            if kind == "reserve":
                amount = abs(amount)
                assert shared.reserve_now([(specs[i], amount)], now) == plain.reserve_now([(parts[i], amount)], now)
            elif kind == "adjust":
                await shared.adjust([(specs[i], amount)], now)
                await plain.adjust([(parts[i], amount)], now)
            else:
                assert await shared.peek(specs[i], now) == await plain.peek(parts[i], now)
            assert shared.state(specs[i].key) == plain.state(parts[i].key)

    asyncio.run(run())


def test_a_share_below_one_is_refused():
    with pytest.raises(ValueError, match="share must be >= 1"):
        MemoryBuckets(share=0)
