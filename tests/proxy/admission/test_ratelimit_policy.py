"""Which buckets a request draws on, settlement deltas, and what a refusal says."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from ledger.usage import TokenUsage
from proxy.admission.ratelimit import _duration, deployment_draws, refusal, request_draws
from proxy.control.declarative import CONTROL_SECTIONS, compile_snapshot
from proxy.control.keys import mint_key
from proxy.limits import MemoryBuckets
from proxy.limits.draws import SEQUENCE_WINDOW_S, items, settlement

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "farebox.yaml"


def snapshot_and_key(**limits):
    tree = {k: v for k, v in yaml.safe_load(EXAMPLE.read_text()).items() if k in CONTROL_SECTIONS}
    minted = mint_key(team="platform", app="playground", aliases=["chat-default"], now_iso="t", limits=limits)
    snap = compile_snapshot(tree, [minted.record])
    return snap, snap.keys[minted.record["hash"]]


def test_key_limits_fall_back_to_defaults_and_team_bucket_counts_both_sides() -> None:
    snap, key = snapshot_and_key(rpm=7)
    draws = {d.spec.key.split(":")[-1]: d for d in request_draws(snap, key, est_input=1874, max_output=600)}
    assert draws["rpm"].spec.capacity == 7 and draws["rpm"].amount == 1
    assert draws["itpm"].spec.capacity == 400_000 and draws["itpm"].amount == 1874  # key_defaults
    assert draws["otpm"].amount == 600
    assert draws["tpm"].spec.key == "team:platform:tpm" and draws["tpm"].amount == 2474


def test_deployment_mirror_is_90_percent_of_provider_limits() -> None:
    snap, _ = snapshot_and_key()
    dep = snap.deployments["sim-openai-mumbai"]
    caps = {d.spec.key: d.spec.capacity for d in deployment_draws(snap, dep, 100, 10)}
    assert caps == {"dep:sim-openai-mumbai:rpm": 9000, "dep:sim-openai-mumbai:itpm": 9_000_000,
                    "dep:sim-openai-mumbai:otpm": 1_800_000}


def test_settlement_charges_or_refunds_the_difference() -> None:
    snap, key = snapshot_and_key()
    draws = request_draws(snap, key, est_input=100, max_output=50)
    deltas = dict((spec.key, d) for spec, d in settlement(draws, TokenUsage(input=80, cached_input=40, output=10)))
    assert deltas[f"key:{key.key_id}:itpm"] == 20  # 120 actual input vs 100 reserved: charge the overrun
    assert deltas[f"key:{key.key_id}:otpm"] == -40
    assert deltas["team:platform:tpm"] == -20
    assert f"key:{key.key_id}:rpm" not in deltas  # a request is a request


async def test_refusal_message_matches_the_documented_shape() -> None:
    snap, key = snapshot_and_key(input_tpm=3000)
    draws = [d for d in request_draws(snap, key, 1874, 600) if d.kind == "input"]
    buckets = MemoryBuckets()
    assert (await buckets.reserve(items(draws), 0)).ok
    res = await buckets.reserve(items(draws), 1_000_000)  # 3000 - 1874 + 1 s of refill (50/s)
    err = refusal(draws, res, 1874, 600)
    assert err.status == 429 and err.code == "key_tokens_per_minute"
    assert err.message.startswith("This key has 1,176 input tokens/min left; the request needs 1,874.")
    assert int(err.headers["Retry-After"]) >= 1
    assert err.headers["x-ratelimit-limit-tokens"] == "3000"


async def test_a_fleets_sequences_are_a_slot_per_attempt_given_back_when_it_is_metered() -> None:
    snap, _ = snapshot_and_key()
    dep = snap.deployments["sim-openai-mumbai"]
    dep = dataclasses.replace(dep, limits=dataclasses.replace(dep.limits, concurrent_sequences=2))
    buckets, now = MemoryBuckets(), 5_000_000
    held = []
    for _ in range(2):
        draws = deployment_draws(snap, dep, 100, 10)
        (seq,) = [d for d in draws if d.kind == "sequences"]
        assert seq.spec.key == "dep:sim-openai-mumbai:seq" and seq.spec.capacity == 2 and seq.amount == 1  # in full
        assert (await buckets.reserve(items(draws), now)).ok
        held.append(draws)
    third = deployment_draws(snap, dep, 100, 10)
    res = await buckets.reserve(items(third), now)
    err = refusal(third, res, 100, 10)
    assert not res.ok and err.code == "provider_capacity" and err.headers["Retry-After"] == "1"
    assert err.message == "Deployment sim-openai-mumbai is serving its limit of 2 concurrent sequences."
    usage = TokenUsage(input=100, output=10)
    assert (dep_seq := next(d for d in held[0] if d.kind == "sequences")).spec in dict(settlement(held[0], usage))
    assert dict(settlement(held[0], usage))[dep_seq.spec] == -1  # the attempt ended: its slot goes back
    await buckets.adjust(settlement(held[0], usage), now)
    assert (await buckets.reserve(items(third), now)).ok
    # a slot never given back (its pod died) returns by itself within the refill window
    later = now + SEQUENCE_WINDOW_S * 1_000_000 // 2
    assert await buckets.peek(dep_seq.spec, later) == 1


def test_reset_durations_read_like_openai() -> None:
    assert [_duration(x) for x in (0.02, 0.5, 4, 59.2, 60, 90)] == ["20ms", "500ms", "4s", "1m0s", "1m0s", "1m30s"]
