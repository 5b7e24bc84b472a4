"""The provider-limit mirrors lowered to what the provider says is left: read per dialect from its headers,
only ever lowered, keeping the mirror's headroom, at most once a second per deployment."""

from __future__ import annotations

import asyncio
import dataclasses

from proxy.limits import MemoryBuckets
from proxy.limits.draws import mirror_specs
from proxy.limits.mirror_sync import MirrorSync
from proxy.snapshot import ProviderLimits
from proxy.upstream.limit_headers import provider_remaining
from tests.proxy.fakes import example_tree, snapshot

NOW = 1_000.0


def _dep(**limits):
    dep = snapshot(example_tree()).deployments["sim-azure-mumbai"]
    return dataclasses.replace(dep, limits=ProviderLimits(**limits))


def test_each_dialect_names_what_is_left_in_its_own_headers() -> None:
    azure = {"x-ratelimit-remaining-requests": "41", "x-ratelimit-remaining-tokens": "9000", "x-other": "1"}
    assert provider_remaining("azure_openai", azure) == {"rpm": 41, "itpm": 9000}
    assert provider_remaining("openai", azure) == {"rpm": 41, "itpm": 9000}
    anthropic = {"anthropic-ratelimit-requests-remaining": "3", "anthropic-ratelimit-input-tokens-remaining": "70",
                 "anthropic-ratelimit-output-tokens-remaining": "8"}
    assert provider_remaining("anthropic", anthropic) == {"rpm": 3, "itpm": 70, "otpm": 8}
    assert provider_remaining("bedrock_converse", azure) == {}
    assert provider_remaining("azure_openai", {"x-ratelimit-remaining-requests": "-4"}) == {}  # not a count
    assert provider_remaining("azure_openai", {"x-ratelimit-remaining-requests": "1e9"}) == {}


async def test_a_mirror_is_lowered_to_the_providers_count_less_its_headroom_never_raised() -> None:
    dep, buckets, clock = _dep(rpm=100, input_tpm=10_000), MemoryBuckets(), [NOW]
    sync = MirrorSync(buckets, lambda: clock[0], lambda: 90)
    specs = {name: spec for name, spec, _ in mirror_specs(dep, 90)}
    now_us = int(NOW * 1_000_000)
    assert await buckets.peek(specs["rpm"], now_us) == 90  # a mirror of 90% of the provider's 100
    sync.observe(dep, {"rpm": 40, "itpm": 9_500})
    await asyncio.gather(*sync._tasks)
    assert await buckets.peek(specs["rpm"], now_us) == 30  # 40 left less the 10 the mirror keeps below
    assert await buckets.peek(specs["itpm"], now_us) == 8_500  # 9,000 of 9,000 > 8,500: lowered too
    clock[0] += 0.5
    sync.observe(dep, {"rpm": 0})  # within the second: not synced again
    assert not sync._tasks
    clock[0] += 0.6
    sync.observe(dep, {"rpm": 99})  # the provider says more than the mirror holds: never raised
    await asyncio.gather(*sync._tasks)
    assert await buckets.peek(specs["rpm"], int(clock[0] * 1_000_000)) < 35
    other = _dep(rpm=100)
    sync.observe(dataclasses.replace(other, id="elsewhere"), {"rpm": 5})  # each deployment its own second
    await asyncio.gather(*sync._tasks)
    assert await buckets.peek(mirror_specs(dataclasses.replace(other, id="elsewhere"), 90)[0][1],
                              int(clock[0] * 1_000_000)) == -5  # 5 - 10: in debt, refilled before any is taken
