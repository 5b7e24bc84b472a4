"""The ``Buckets`` contract, run against MemoryBuckets and RedisBuckets (real redis-server)."""

from __future__ import annotations

import asyncio
import random

import pytest

from proxy.limits import Buckets, BucketSpec, InvalidBucket

T0 = 1_700_000_000_000_000  # a realistic epoch in microseconds: exactness must hold at this size
S = 1_000_000


class TestBucketsContract:
    async def test_is_a_buckets(self, buckets):
        assert isinstance(buckets, Buckets)

    async def test_a_new_bucket_is_full(self, buckets):
        assert await buckets.peek(BucketSpec("new", 500), T0) == 500

    async def test_reserve_takes_and_reports_remaining_and_reset(self, buckets):
        tpm, rpm = BucketSpec("k:tpm", 60), BucketSpec("k:rpm", 10)
        got = await buckets.reserve([(tpm, 30), (rpm, 1)], T0)
        assert got.ok and got.failed_key is None
        assert got.remaining == {"k:tpm": 30, "k:rpm": 9}
        assert got.reset_s == {"k:tpm": 30.0, "k:rpm": 6.0}
        assert await buckets.peek(tpm, T0) == 30

    async def test_reserve_is_all_or_nothing_and_names_the_first_short_bucket(self, buckets):
        a, b, c = BucketSpec("a", 10), BucketSpec("b", 5), BucketSpec("c", 1)
        got = await buckets.reserve([(a, 3), (b, 6), (c, 2)], T0)
        assert not got.ok
        assert (got.failed_key, got.needed) == ("b", 6)
        assert got.remaining == {"a": 10, "b": 5, "c": 1}
        assert [await buckets.peek(s, T0) for s in (a, b, c)] == [10, 5, 1]
        assert (await buckets.reserve([(a, 3), (b, 5), (c, 1)], T0)).remaining == {"a": 7, "b": 0, "c": 0}

    async def test_a_key_named_twice_is_summed(self, buckets):
        a = BucketSpec("twice", 10)
        assert (await buckets.reserve([(a, 3), (a, 4)], T0)).remaining == {"twice": 3}
        assert not (await buckets.reserve([(a, 2), (a, 2)], T0)).ok

    async def test_refill_is_continuous_and_capped(self, buckets):
        spec = BucketSpec("refill", 60)  # 1 unit per second
        await buckets.reserve([(spec, 60)], T0)
        assert await buckets.peek(spec, T0) == 0
        assert await buckets.peek(spec, T0 + S - 1) == 0
        assert await buckets.peek(spec, T0 + S) == 1
        assert await buckets.peek(spec, T0 + 30 * S + S // 2) == 30
        assert await buckets.peek(spec, T0 + 600 * S) == 60

    async def test_refill_in_tiny_steps_loses_nothing(self, buckets):
        spec = BucketSpec("steps", 7, window_s=60)  # 7 per minute: no step of 1 ms refills a unit
        await buckets.reserve([(spec, 7)], T0)
        for i in range(1, 301):
            await buckets.adjust([(spec, 0)], T0 + i * 1000)  # writes the refilled state
        # 300 ms of refill at 7/60 s, and exactly the same as one step of 300 ms
        assert (await buckets.reserve([(spec, 0)], T0 + 300_000)).reset_s["steps"] == pytest.approx(
            60 - 0.3, abs=1e-6
        )
        await buckets.adjust([(spec, 0)], T0 + 9 * S)
        assert await buckets.peek(spec, T0 + 9 * S) == 1  # 9 s * 7/60 = 1.05

    async def test_retry_after_is_the_refill_time_in_whole_seconds(self, buckets):
        spec = BucketSpec("retry", 60)
        await buckets.reserve([(spec, 50)], T0)
        got = await buckets.reserve([(spec, 20)], T0)
        assert (got.ok, got.failed_key, got.remaining["retry"], got.needed) == (False, "retry", 10, 20)
        assert got.retry_after_s == 10
        assert not got.exceeds_capacity
        assert (await buckets.reserve([(spec, 20)], T0 + 10 * S - 1)).ok is False
        assert (await buckets.reserve([(spec, 20)], T0 + 10 * S)).ok is True

    async def test_retry_after_is_at_least_one_second(self, buckets):
        spec = BucketSpec("soon", 60)
        await buckets.reserve([(spec, 60)], T0)
        got = await buckets.reserve([(spec, 1)], T0 + 900_000)  # 0.9 units: 0.1 s to go
        assert (got.ok, got.retry_after_s) == (False, 1)

    async def test_more_than_capacity_never_fits(self, buckets):
        spec = BucketSpec("huge", 100)
        await buckets.reserve([(spec, 40)], T0)
        got = await buckets.reserve([(spec, 101)], T0)
        assert not got.ok and got.exceeds_capacity
        assert got.retry_after_s == 24  # until full: 40 units at 100/60 s
        assert got.reset_s["huge"] == 24.0

    async def test_adjust_refunds_up_to_capacity(self, buckets):
        spec = BucketSpec("refund", 100)
        await buckets.reserve([(spec, 80)], T0)
        await buckets.adjust([(spec, -30)], T0)
        assert await buckets.peek(spec, T0) == 50
        await buckets.adjust([(spec, -500)], T0)
        assert await buckets.peek(spec, T0) == 100
        assert (await buckets.reserve([(spec, 0)], T0)).reset_s == {"refund": 0.0}

    async def test_adjust_charges_into_debt_repaid_by_refill(self, buckets):
        spec = BucketSpec("debt", 60)
        await buckets.reserve([(spec, 50)], T0)
        await buckets.adjust([(spec, 50)], T0)  # the request used 100, not 50
        assert await buckets.peek(spec, T0) == -40
        got = await buckets.reserve([(spec, 1)], T0)
        assert (got.ok, got.remaining, got.retry_after_s) == (False, {"debt": -40}, 41)
        assert got.reset_s == {"debt": 100.0}
        assert await buckets.peek(spec, T0 + 40 * S) == 0
        assert await buckets.peek(spec, T0 + 100 * S) == 60

    async def test_deep_debt_spanning_windows(self, buckets):
        spec = BucketSpec("deep", 10, window_s=1)
        await buckets.adjust([(spec, 45)], T0)  # -35: 4.5 windows to full
        assert await buckets.peek(spec, T0 + 3 * S) == -5
        assert await buckets.peek(spec, T0 + 4 * S + 400_000) == 9
        assert await buckets.peek(spec, T0 + 4 * S + 500_000) == 10

    async def test_time_going_backwards_refills_nothing(self, buckets):
        spec = BucketSpec("skew", 60)
        await buckets.reserve([(spec, 60)], T0 + 10 * S)
        assert await buckets.peek(spec, T0) == 0  # a pod whose clock lags
        await buckets.adjust([(spec, 0)], T0)
        assert await buckets.peek(spec, T0 + 11 * S) == 1

    async def test_a_smaller_capacity_clamps_the_level(self, buckets):
        await buckets.reserve([(BucketSpec("shrink", 100), 10)], T0)
        assert await buckets.peek(BucketSpec("shrink", 50), T0) == 50

    async def test_keys_are_isolated(self, buckets):
        a, b = BucketSpec("team:1", 10), BucketSpec("team:2", 10)
        await buckets.reserve([(a, 10)], T0)
        assert not (await buckets.reserve([(a, 1)], T0)).ok
        assert (await buckets.reserve([(b, 10)], T0)).ok
        assert await buckets.peek(BucketSpec("team:3", 10), T0) == 10

    async def test_concurrent_reserves_never_over_admit(self, buckets):
        spec = BucketSpec("crowd", 50)
        results = await asyncio.gather(*(buckets.reserve([(spec, 1)], T0) for _ in range(500)))
        assert sum(r.ok for r in results) == 50
        assert await buckets.peek(spec, T0) == 0

    async def test_concurrent_multi_bucket_reserves_are_atomic(self, buckets):
        rpm, tpm = BucketSpec("c:rpm", 40), BucketSpec("c:tpm", 1000)
        sizes = [random.Random(i).randint(1, 30) for i in range(300)]
        results = await asyncio.gather(*(buckets.reserve([(rpm, 1), (tpm, n)], T0) for n in sizes))
        admitted = [n for n, r in zip(sizes, results) if r.ok]
        assert len(admitted) <= 40 and sum(admitted) <= 1000
        assert await buckets.peek(rpm, T0) == 40 - len(admitted)
        assert await buckets.peek(tpm, T0) == 1000 - sum(admitted)
        assert len(admitted) == 40 or any(r.failed_key == "c:tpm" for r in results)

    async def test_invalid_input_is_refused(self, buckets):
        with pytest.raises(InvalidBucket):
            await buckets.reserve([(BucketSpec("neg", 10), -1)], T0)
        with pytest.raises(InvalidBucket):
            await buckets.reserve([(BucketSpec("x", 10), 1), (BucketSpec("x", 11), 1)], T0)
        with pytest.raises(InvalidBucket):
            await buckets.peek(BucketSpec("t", 10), -5)
        assert (await buckets.reserve([], T0)).ok


def test_specs_outside_the_exact_range_are_refused():
    BucketSpec("big", 150_000_000, 60)
    with pytest.raises(InvalidBucket):
        BucketSpec("too-big", 151_000_000, 60)
    with pytest.raises(InvalidBucket):
        BucketSpec("zero", 0)


class TestIdleBucketsVanish:
    """Stored state lives until the bucket would read full, plus ``ttl_windows``; after that a
    missing bucket and a full one are the same, so forgetting it changes no answer."""

    async def test_memory_sweeps_idle_buckets(self):
        from proxy.limits import MemoryBuckets

        buckets = MemoryBuckets(ttl_windows=1)
        spec, busy = BucketSpec("idle", 60), BucketSpec("busy", 60)
        await buckets.reserve([(spec, 30)], T0)  # full again at T0 + 30 s; forgettable at +90 s
        await buckets.reserve([(busy, 60)], T0 + 80 * S)
        buckets.sweep(T0 + 90 * S - 1)
        assert buckets.state("idle") is not None
        buckets.sweep(T0 + 90 * S)
        assert buckets.state("idle") is None and buckets.state("busy") is not None
        assert len(buckets) == 1
        assert await buckets.peek(spec, T0 + 90 * S) == 60

    async def test_redis_keys_get_a_ttl_of_time_to_full_plus_a_window(self, redis_server):
        from bucket_helpers import redis_buckets

        buckets = redis_buckets(redis_server, ttl_windows=1)
        try:
            await buckets.reserve([(BucketSpec("ttl", 60), 30)], T0)
            ttl_ms = await buckets.client.pttl(buckets.redis_key("ttl"))
            assert 89_000 < ttl_ms <= 90_000  # 30 s to full + one 60 s window
            await buckets.adjust([(BucketSpec("ttl", 60), -30)], T0)  # full now: one window
            assert 59_000 < await buckets.client.pttl(buckets.redis_key("ttl")) <= 60_000
        finally:
            await buckets.close()

    async def test_redis_idle_keys_expire_for_real(self, redis_server):
        from bucket_helpers import redis_buckets

        buckets = redis_buckets(redis_server, ttl_windows=1)
        try:
            spec = BucketSpec("vanish", 10_000, window_s=1)
            await buckets.reserve([(spec, 10)], T0)  # 1 ms to full, then a 1 s window
            assert await buckets.client.exists(buckets.redis_key("vanish")) == 1
            await asyncio.sleep(1.1)
            assert await buckets.client.exists(buckets.redis_key("vanish")) == 0
            assert await buckets.peek(spec, T0 + 2 * S) == 10_000
        finally:
            await buckets.close()
