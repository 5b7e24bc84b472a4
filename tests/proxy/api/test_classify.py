"""The classify step: both sides decided once, routing by side, the body chosen per deployment."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml

from proxy.control.declarative import CONTROL_SECTIONS, compile_snapshot
from proxy.control.problems import Problems
from proxy.errors import PermissionDenied
from proxy.privacy.classify import PrivacyError, classify_chat, classify_texts
from proxy.routing.router import Needs, route
from proxy.routing.state import RoutingState
from proxy.snapshot import KeyRecord

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "farebox.yaml"
EMAIL = "asha.k@example.com"


def tree() -> dict:
    return {k: v for k, v in yaml.safe_load(EXAMPLE.read_text()).items() if k in CONTROL_SECTIONS}


def with_self_hosted(t: dict) -> None:
    base = dict(t["deployments"][0])
    t["deployments"].append({**base, "id": "local", "self_hosted": True, "region": "on-prem",
                             "data_classes": ["internal", "confidential", "restricted"], "weight": 1})
    t["aliases"][0]["deployments"].append("local")


from tests.harness import without_standbys  # noqa: E402


def snapshot(mutate=lambda t: None):
    t = without_standbys(tree())
    mutate(t)
    snap = compile_snapshot(t, ())
    assert snap is not None
    return snap


def key(ceiling: str = "restricted") -> KeyRecord:
    return KeyRecord(key_id="k1", key_hash="h", team="platform", app="playground", business_unit=None,
                     aliases=frozenset({"chat-default"}),
                     data_class_ceiling=ceiling)


def chat(text: str) -> dict:
    return {"model": "chat-default", "messages": [{"role": "user", "content": text}]}


def needs_of(c) -> Needs:
    return Needs((), c.data_class, 10, outside_class=c.outside_class, outside_refused=c.outside_class is None)


def test_example_policy_redacts_pii_for_outside_deployments_only() -> None:
    snap = snapshot(with_self_hosted)
    body = chat(f"mail {EMAIL}")
    c = classify_chat(snap.privacy, key(), None, body)
    assert (c.data_class, c.outside_class) == ("confidential", "internal")
    outside, local = snap.deployments["sim-openai-mumbai"], snap.deployments["local"]
    assert c.redacts(outside) and not c.redacts(local)
    assert c.body_for(local, body) is body
    assert c.body_for(outside, body)["messages"][0]["content"] == "mail <EMAIL_1>"
    assert body["messages"][0]["content"] == f"mail {EMAIL}"  # the caller's body is untouched
    ids = {d.id for d in route(snap, snap.aliases["chat-default"], needs_of(c), RoutingState(clock=lambda: 0.0),
                               0.0, random.Random())}
    assert ids == {"sim-openai-mumbai", "sim-anthropic-mumbai", "local"}


def test_nothing_found_copies_nothing() -> None:
    snap = snapshot()
    body = chat("hello there")
    c = classify_chat(snap.privacy, key(), None, body)
    assert c.redaction is None and c.redacted_body is None
    assert c.body_for(snap.deployments["sim-openai-mumbai"], body) is body


def test_restricted_goes_only_self_hosted_and_is_refused_without_one() -> None:
    body = chat("token sk-proj-" + "Zx9" * 12)
    snap = snapshot(with_self_hosted)
    c = classify_chat(snap.privacy, key(), None, body)
    assert c.outside_class is None
    picked = route(snap, snap.aliases["chat-default"], needs_of(c), RoutingState(clock=lambda: 0.0), 0.0,
                   random.Random())
    assert [d.id for d in picked] == ["local"]
    plain = snapshot()
    c = classify_chat(plain.privacy, key(), None, body)
    with pytest.raises(PermissionDenied):
        route(plain, plain.aliases["chat-default"], needs_of(c), RoutingState(clock=lambda: 0.0), 0.0,
              random.Random())
    refusal = c.refusal()
    assert refusal is not None and refusal.status == 403 and refusal.code == "data_class_refused"
    assert "secret" in refusal.message and "Zx9" not in refusal.message


def test_refusals_are_openai_shaped_and_name_kinds_only() -> None:
    snap = snapshot()
    with pytest.raises(PrivacyError) as err:
        classify_chat(snap.privacy, key("internal"), None, chat(f"mail {EMAIL}"))
    assert (err.value.status, err.value.code) == (403, "data_class_not_allowed")
    assert "email" in err.value.message and EMAIL not in err.value.message
    with pytest.raises(PrivacyError) as err:
        classify_chat(snap.privacy, key(), "secret-ish", chat("hi"))
    assert (err.value.status, err.value.code, err.value.param) == (400, "invalid_data_class", "x-fb-data-class")


def test_embeddings_input_with_pii_stays_inside() -> None:
    snap = snapshot()
    c = classify_texts(snap.privacy, key(), None, [f"mail {EMAIL}"])
    assert c.data_class == "confidential" and c.outside_class is None
    assert c.refusal() is not None and "1 email" in c.refusal().message
    assert classify_texts(snap.privacy, key(), None, ["plain"]).outside_class == "internal"


def test_privacy_section_problems_are_listed_with_paths() -> None:
    t = tree()
    t["privacy"] = {"classes": {"confidential": {"action": "shred"}}, "kind_classes": {"dna": "restricted"}}
    problems = Problems()
    assert compile_snapshot(t, (), problems=problems) is None
    text = "\n".join(problems.items)
    assert "privacy.classes.confidential.action" in text and "privacy.kind_classes.dna" in text
