"""The declarative config compiles to a snapshot, or lists every problem with its path."""

from __future__ import annotations

import copy
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from proxy.control.declarative import CONTROL_SECTIONS, compile_snapshot
from proxy.control.keys import mint_key
from proxy.control.problems import ConfigError, Problems

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "farebox.yaml"


@pytest.fixture
def tree() -> dict:
    full = yaml.safe_load(EXAMPLE.read_text())
    return {k: v for k, v in full.items() if k in CONTROL_SECTIONS}


def compile_or_problems(tree: dict, keys=()) -> tuple:
    problems = Problems()
    snap = compile_snapshot(tree, keys, problems=problems)
    return snap, problems.items


def test_example_compiles(tree: dict) -> None:
    snap, problems = compile_or_problems(tree)
    assert problems == []
    assert set(snap.aliases) == {"chat-default", "embed-default"}
    assert snap.aliases["chat-default"].deployments == ("sim-openai-mumbai", "sim-anthropic-mumbai", "sim-azure-mumbai",
                                                        "sim-bedrock-mumbai", "sim-gemini-mumbai")
    assert [snap.deployments[d].weight for d in snap.aliases["chat-default"].deployments] == [60, 40, 0, 0, 0]
    price = snap.price_book.latest.price("sim-openai-mumbai")
    assert price.input == Decimal("2.00") and price.cached_input == Decimal("0.20")
    assert snap.teams["platform"].business_unit == "retail"
    assert len(snap.content_hash) == 64


def test_hash_is_stable_and_content_sensitive(tree: dict) -> None:
    a, _ = compile_or_problems(tree)
    b, _ = compile_or_problems(copy.deepcopy(tree))
    assert a.content_hash == b.content_hash
    changed = copy.deepcopy(tree)
    changed["deployments"][0]["weight"] = 7
    c, _ = compile_or_problems(changed)
    assert c.content_hash != a.content_hash


def test_every_problem_reported_at_once(tree: dict) -> None:
    bad = copy.deepcopy(tree)
    bad["deployments"][0]["dialect"] = "cohere"
    bad["deployments"][0]["weight"] = -1
    bad["deployments"][1]["price_per_1m"]["output"] = "ten"
    bad["deployments"][1]["colour"] = "blue"
    bad["aliases"][0]["deployments"].append("ghost")
    bad["aliases"][1]["fallback_alias"] = "nowhere"
    bad["teams"].append({"name": "x", "business_unit": "unknown-bu"})
    bad["fx"][0]["month"] = "Nov 2026"
    bad["aliases"][0]["batch_service_tier"] = "Flex Tier"
    bad["aliases"][0]["batch_via"] = "carrier-pigeon"
    bad["aliases"][1]["batch_via"] = "provider"  # an embeddings alias
    snap, problems = compile_or_problems(bad)
    assert snap is None
    joined = "\n".join(problems)
    for fragment in (
        "deployments[0].dialect: must be one of",
        "deployments[0].weight: must be >= 0",
        "deployments[1].price_per_1m.output: must be a decimal number",
        "deployments[1].colour: unknown field",
        "aliases[0].deployments[5]: unknown deployment 'ghost'",
        "aliases.embed-default.fallback_alias: unknown alias 'nowhere'",
        "teams[2].business_unit: unknown business unit",
        "fx[0].month: must be YYYY-MM",
        "aliases[0].batch_service_tier: must be a service tier's name",
        "aliases[0].batch_via: must be gateway or provider",
        "aliases[1].batch_via: provider batches run chat requests only",
    ):
        assert fragment in joined, (fragment, joined)


def test_alias_needs_must_be_met_by_every_deployment(tree: dict) -> None:
    bad = copy.deepcopy(tree)
    bad["aliases"][1]["needs"] = ["tools"]
    _, problems = compile_or_problems(bad)
    assert any("lacks ['tools']" in p for p in problems)


def test_stored_keys_are_checked(tree: dict) -> None:
    good = mint_key(team="platform", app="playground", aliases=["chat-default"], now_iso="t").record
    bad = {**good, "hash": "nothex", "team": "ghosts", "aliases": ["chat-zzz"]}
    snap, problems = compile_or_problems(tree, [good])
    assert problems == [] and good["hash"] in snap.keys
    _, problems = compile_or_problems(tree, [bad])
    assert any(p.startswith("stored keys[0].hash") for p in problems)
    assert any("unknown team 'ghosts'" in p for p in problems)
    assert any("unknown alias 'chat-zzz'" in p for p in problems)


def test_config_error_lists_all() -> None:
    err = ConfigError(["a: x", "b: y"], "f.yaml")
    assert "2 problem(s)" in str(err) and "a: x" in str(err) and "b: y" in str(err)


def test_rate_limits_beyond_exact_bucket_range_are_config_errors(tree: dict) -> None:
    bad = copy.deepcopy(tree)
    bad["rate_limits"]["key_defaults"]["input_tpm"] = 1_000_000_000
    _, problems = compile_or_problems(bad)
    assert any(p.startswith("rate_limits.key_defaults.input_tpm: must be <=") for p in problems)


@pytest.mark.parametrize(("value", "problem"), [(0, "must be >= 1"), (100_001, "must be <= 100,000"),
                                                ("many", "must be an integer")])
def test_a_fleets_concurrent_sequences_are_checked(tree: dict, value, problem) -> None:
    bad = copy.deepcopy(tree)
    bad["deployments"][0]["limits"]["concurrent_sequences"] = value
    _, problems = compile_or_problems(bad)
    assert any(p.startswith("deployments[0].limits.concurrent_sequences: " + problem) for p in problems), problems


def test_concurrent_sequences_reach_the_snapshot(tree: dict) -> None:
    good = copy.deepcopy(tree)
    good["deployments"][0]["limits"]["concurrent_sequences"] = 64
    snap, problems = compile_or_problems(good)
    assert not problems and snap.deployments[good["deployments"][0]["id"]].limits.concurrent_sequences == 64
