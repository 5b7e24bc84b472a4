"""Sticky splits (``proxy.routing.split``): a 90/10 split holds its weights within 2 points over 1,000 callers,
each caller stays on one variant, moving weight moves only the callers in the moved range, and the config is
checked (variants exist, are the same kind, do not nest, weigh something)."""

from __future__ import annotations

import copy
from collections import Counter

from proxy.control.declarative import compile_snapshot
from proxy.control.problems import Problems
from proxy.routing.split import choose, split_value
from proxy.snapshot import Split, Variant
from tests.proxy.fakes import example_tree

SPLIT = Split("user", (Variant("current", "chat-default", 90), Variant("candidate", "chat-anthropic", 10)))


def test_a_90_10_split_holds_its_weights_and_each_caller_sticks() -> None:
    seen = Counter(choose(SPLIT, "chat-split", f"u:user-{i}").name for i in range(1000))
    assert abs(seen["candidate"] / 1000 - 0.10) <= 0.02 and seen["current"] + seen["candidate"] == 1000
    for i in range(50):  # the same caller, asked again and again: the same variant
        assert len({choose(SPLIT, "chat-split", f"u:user-{i}").name for _ in range(20)}) == 1


def test_moving_weight_moves_only_the_callers_in_the_moved_range() -> None:
    wider = Split("user", (Variant("current", "chat-default", 80), Variant("candidate", "chat-anthropic", 20)))
    before = {i: choose(SPLIT, "chat-split", f"u:{i}").name for i in range(2000)}
    after = {i: choose(wider, "chat-split", f"u:{i}").name for i in range(2000)}
    assert all(after[i] == "candidate" for i in before if before[i] == "candidate")  # nobody leaves the candidate
    moved = sum(before[i] != after[i] for i in before)
    assert abs(moved / 2000 - 0.10) <= 0.02


def test_the_value_hashed_falls_back_to_the_key() -> None:
    assert split_value(SPLIT, {}, {"user": "ana"}, "fb-k1") == "u:ana"
    assert split_value(SPLIT, {}, {}, "fb-k1") == "k:fb-k1"
    by_session = Split("session", SPLIT.variants)
    assert split_value(by_session, {"x-fb-session": "s9"}, {"user": "ana"}, "fb-k1") == "s:s9"
    assert split_value(Split("key", SPLIT.variants), {}, {"user": "ana"}, "fb-k1") == "k:fb-k1"


def _problems(tree: dict) -> list[str]:
    problems = Problems()
    compile_snapshot(tree, (), problems=problems)
    return problems.items


def test_a_split_is_checked() -> None:
    tree = example_tree()
    good = copy.deepcopy(tree)
    good["aliases"].append({"name": "chat-split", "kind": "chat", "deployments": ["sim-openai-mumbai"],
                            "split": {"key": "user", "variants": [
                                {"name": "current", "alias": "chat-default", "weight": 90},
                                {"name": "candidate", "alias": "chat-default", "weight": 10}]}})
    snap = compile_snapshot(good, ())
    assert snap is not None and snap.aliases["chat-split"].split.variants[1].weight == 10
    bad = copy.deepcopy(good)
    bad["aliases"][-1]["split"] = {"key": "cookie", "variants": [
        {"name": "a", "alias": "ghost", "weight": 1}, {"name": "a", "alias": "embed-default", "weight": 0}]}
    text = "\n".join(map(str, _problems(bad)))
    for fragment in ("split.key: must be one of", "has two variants of the same name", "unknown alias 'ghost'",
                     "is a embeddings alias, not chat"):
        assert fragment in text, (fragment, text)


def test_a_shadow_is_checked_and_paid_by_a_key_of_its_own() -> None:
    tree = example_tree()
    good = copy.deepcopy(tree)
    good["aliases"].append({"name": "chat-shadowed", "kind": "chat", "deployments": ["sim-openai-mumbai"],
                            "shadow": {"alias": "chat-default", "pct": "2.5", "team": "platform"}})
    snap = compile_snapshot(good, ())
    assert snap is not None
    shadow = snap.aliases["chat-shadowed"].shadow
    assert shadow is not None and str(shadow.pct) == "2.5" and shadow.alias == "chat-default"
    key = snap.shadow_keys["shadow.chat-shadowed"]
    assert (key.team, key.app, key.aliases, key.key_hash) == ("platform", "shadow", frozenset({"chat-default"}), "")
    assert key.key_hash not in snap.keys  # never presented by a caller: no secret, not among the keys
    bad = copy.deepcopy(good)
    bad["aliases"][-1]["shadow"] = {"alias": "embed-default", "pct": 0, "team": "ghosts"}
    text = "\n".join(_problems(bad))
    assert "shadow.pct: must be a percentage above 0 and at most 100" in text
    assert "shadow.alias: alias 'embed-default' must be another chat alias without a shadow" in text
    assert "shadow.team: unknown team 'ghosts'" in text
