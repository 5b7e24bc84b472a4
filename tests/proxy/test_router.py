"""Routing: filter by capability, data class and context; weighted order."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
import yaml

from proxy.admission.auth import allowed_alias, authenticate, data_class
from proxy.control.declarative import CONTROL_SECTIONS, compile_snapshot
from proxy.control.keys import mint_key
from proxy.errors import AuthenticationFailed, InvalidRequest, NotFound, PermissionDenied, UnsupportedParameter
from proxy.routing.router import Needs, candidates, chat_needs
from tests.harness import without_standbys  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "farebox.yaml"


def snapshot(mutate=lambda t: None, keys=()):
    tree = without_standbys({k: v for k, v in yaml.safe_load(EXAMPLE.read_text()).items() if k in CONTROL_SECTIONS})
    mutate(tree)
    snap = compile_snapshot(tree, keys)
    assert snap is not None
    return snap


def test_weighted_order_follows_weights() -> None:
    snap = snapshot()
    alias = snap.aliases["chat-default"]
    rng = random.Random(1)
    firsts = Counter(candidates(snap, alias, Needs((), "internal", 10), rng)[0].id for _ in range(4000))
    share = firsts["sim-openai-mumbai"] / 4000
    assert 0.56 < share < 0.64  # weights 60 / 40


def test_capability_filter_names_the_parameter() -> None:
    def no_tools(tree):
        for dep in tree["deployments"]:
            dep["capabilities"] = [c for c in dep["capabilities"] if c != "tools"]

    snap = snapshot(no_tools)
    needs = chat_needs({"tools": [{"type": "function", "function": {"name": "f"}}]}, "internal", 10)
    with pytest.raises(UnsupportedParameter) as err:
        candidates(snap, snap.aliases["chat-default"], needs, random.Random())
    assert err.value.param == "tools"


def test_data_class_filter_refuses_rather_than_sends() -> None:
    snap = snapshot()
    with pytest.raises(PermissionDenied) as err:
        candidates(snap, snap.aliases["chat-default"], Needs((), "restricted", 10), random.Random())
    assert err.value.code == "data_class_not_routable"


def test_context_window_filter() -> None:
    snap = snapshot()
    only = candidates(snap, snap.aliases["chat-default"], Needs((), "internal", 150_000), random.Random())
    assert [d.id for d in only] == ["sim-anthropic-mumbai"]
    with pytest.raises(InvalidRequest) as err:
        candidates(snap, snap.aliases["chat-default"], Needs((), "internal", 250_000), random.Random())
    assert err.value.code == "context_length_exceeded"


def test_auth_and_alias_policy() -> None:
    minted = mint_key(team="platform", app="playground", aliases=["embed-default"], now_iso="t", expires_at=100.0)
    revoked = {**mint_key(team="platform", app="playground", aliases=["chat-default"], now_iso="t").record,
               "revoked": True}
    snap = snapshot(keys=[minted.record, revoked])
    key = authenticate(snap, f"Bearer {minted.plaintext}", now=50.0)
    assert key.team == "platform"
    with pytest.raises(AuthenticationFailed) as err:
        authenticate(snap, f"Bearer {minted.plaintext}", now=100.0)
    assert err.value.code == "expired_api_key"
    with pytest.raises(AuthenticationFailed):
        authenticate(snap, "Bearer nope", now=0)
    assert allowed_alias(snap, key, "embed-default", "embeddings").name == "embed-default"
    with pytest.raises(PermissionDenied):
        allowed_alias(snap, key, "chat-default", "chat")
    with pytest.raises(NotFound):
        allowed_alias(snap, key, "ghost", "chat")
    assert data_class(key, None) == "internal"
    assert data_class(key, "public") == "internal"  # max(key default, tag)
    with pytest.raises(PermissionDenied):
        data_class(key, "confidential")
