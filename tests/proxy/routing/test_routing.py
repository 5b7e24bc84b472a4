"""Filter, then score: restricted data, residency, breaker/pause state, stickiness, canary split."""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from pathlib import Path

import orjson
import pytest
import yaml

from proxy.control.declarative import CONTROL_SECTIONS, compile_snapshot
from proxy.errors import PermissionDenied
from proxy.outcomes import FAILED, RATE_LIMITED
from proxy.routing.router import Needs, NoDeploymentAvailable, ProviderCapacity, route, sticky_key
from proxy.routing.state import RoutingState
from tests.harness import without_standbys

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "farebox.yaml"


def snapshot(mutate=lambda t: None):
    tree = without_standbys({k: v for k, v in yaml.safe_load(EXAMPLE.read_text()).items() if k in CONTROL_SECTIONS})
    mutate(tree)
    snap = compile_snapshot(tree, ())
    assert snap is not None
    return snap


def with_self_hosted(tree: dict) -> None:
    base = dict(tree["deployments"][0])
    tree["deployments"].append({**base, "id": "local", "self_hosted": True, "region": "on-prem",
                                "data_classes": ["internal", "confidential", "restricted"], "weight": 1})
    for d in tree["deployments"][:2]:
        d["data_classes"] = ["internal", "confidential", "restricted"]  # listed, but external
    tree["aliases"][0]["deployments"].append("local")


def test_restricted_only_goes_self_hosted() -> None:
    snap = snapshot(with_self_hosted)
    alias, state = snap.aliases["chat-default"], RoutingState(clock=lambda: 0.0)
    for _ in range(50):
        assert [d.id for d in route(snap, alias, Needs((), "restricted", 10), state, 0.0, random.Random())] == ["local"]


def test_restricted_refused_when_self_hosted_is_down() -> None:
    snap = snapshot(with_self_hosted)
    alias, state = snap.aliases["chat-default"], RoutingState(clock=lambda: 0.0)
    local = snap.deployments["local"]
    for _ in range(50):  # min_requests, all failing
        assert state.start(local, 0.0)
        state.finish(local, FAILED, 0.0)
    with pytest.raises(NoDeploymentAvailable) as err:
        route(snap, alias, Needs((), "restricted", 10), state, 1.0, random.Random())
    assert "restricted" in err.value.message and "not sent" in err.value.message
    assert err.value.headers["Retry-After"] == "4"
    # other classes still flow to the external deployments
    assert route(snap, alias, Needs((), "internal", 10), state, 1.0, random.Random())


def test_residency_pin_refuses_rather_than_going_abroad() -> None:
    snap = snapshot(with_self_hosted)
    alias, state = snap.aliases["chat-default"], RoutingState()
    got = route(snap, alias, Needs((), "internal", 10, regions=frozenset({"on-prem"})), state, 0.0, random.Random())
    assert [d.id for d in got] == ["local"]
    with pytest.raises(PermissionDenied) as err:
        route(snap, alias, Needs((), "internal", 10, regions=frozenset({"eu-west-1"})), state, 0.0, random.Random())
    assert err.value.code == "region_not_routable"


def test_paused_deployment_goes_last_and_all_paused_is_a_429() -> None:
    snap = snapshot()
    alias, state = snap.aliases["chat-default"], RoutingState()
    a, b = (snap.deployments[d] for d in alias.deployments)
    state.start(a, 0.0)
    state.finish(a, RATE_LIMITED, 0.0, retry_after_s=2.0)
    for _ in range(20):
        assert [d.id for d in route(snap, alias, Needs((), "internal", 10), state, 1.0, random.Random())] == [b.id, a.id]
    state.start(b, 0.0)
    state.finish(b, RATE_LIMITED, 0.0, retry_after_s=5.0)
    order = route(snap, alias, Needs((), "internal", 10), state, 1.0, random.Random())
    assert [d.id for d in order] == [a.id, b.id]  # soonest free first, as a last resort
    assert route(snap, alias, Needs((), "internal", 10), state, 6.0, random.Random())  # pauses over
    state.breakers.clear()


def test_all_paused_and_open_is_refused() -> None:
    snap = snapshot(lambda t: t["aliases"][0].update(deployments=["sim-openai-mumbai"]))
    alias, state = snap.aliases["chat-default"], RoutingState()
    dep = snap.deployments["sim-openai-mumbai"]
    for _ in range(60):
        state.start(dep, 0.0)
        state.finish(dep, FAILED, 0.0)
    with pytest.raises(NoDeploymentAvailable):
        route(snap, alias, Needs((), "internal", 10), state, 1.0, random.Random())
    assert not isinstance(NoDeploymentAvailable("x"), ProviderCapacity)


def test_sticky_session_stays_and_splits_by_weight() -> None:
    snap = snapshot()
    alias, state = snap.aliases["chat-default"], RoutingState()
    needs = Needs((), "internal", 10)
    rng = random.Random(3)
    firsts = {route(snap, alias, needs, state, 0.0, rng, "s:alice")[0].id for _ in range(50)}
    assert len(firsts) == 1  # one session, one deployment
    split = Counter(route(snap, alias, needs, state, 0.0, rng, f"u:{i}")[0].id for i in range(4000))
    assert 0.56 < split["sim-openai-mumbai"] / 4000 < 0.64  # the 60/40 canary split, stable per user


def test_sticky_key_sources() -> None:
    long = [{"role": "system", "content": "rules " * 2000}, {"role": "user", "content": "q1"}]
    assert sticky_key("abc", {"user": "u"}) == "s:abc"
    assert sticky_key(None, {"user": "u"}) == "u:u"
    assert sticky_key(None, {"messages": [{"role": "user", "content": "short"}]}) is None
    k1 = sticky_key(None, {"messages": long})
    k2 = sticky_key(None, {"messages": long[:1] + [{"role": "user", "content": "a different question"}]})
    assert k1 is not None and k1 == k2  # same long prefix, same deployment: the provider's prompt cache hits
    prefix = orjson.dumps([None, long])[:4096]  # the key is the BLAKE2b-128 of the first 4,096 bytes
    assert k1 == "p:" + hashlib.blake2b(prefix, digest_size=16).hexdigest()


def test_unhealthy_deployment_gets_less_traffic() -> None:
    snap = snapshot()
    alias, state = snap.aliases["chat-default"], RoutingState()
    a = snap.deployments["sim-openai-mumbai"]
    for i in range(40):
        state.start(a, i * 0.01)
        state.finish(a, FAILED if i % 2 else "ok", i * 0.01)
    rng = random.Random(5)
    share = Counter(route(snap, alias, Needs((), "internal", 10), state, 0.5, rng)[0].id for _ in range(2000))
    assert share["sim-openai-mumbai"] / 2000 < 0.3  # was 0.6 by weight
