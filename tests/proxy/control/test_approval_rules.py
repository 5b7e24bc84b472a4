"""Which admin-API changes take a second person (``proxy.control.approvals.needs_approval``): pure."""

from __future__ import annotations

from proxy.control.approvals import needs_approval
from tests.proxy.fakes import snapshot

SNAP = snapshot()
MICRO = 1_000_000


def test_every_admin_token_takes_two() -> None:
    for role in ("admin", "finance", "auditor"):
        assert "second admin" in needs_approval(SNAP, "admin_tokens.create", {"name": "x", "role": role}, None)


def test_a_new_deployment_takes_two_an_edit_does_not() -> None:
    assert needs_approval(SNAP, "deployments.put", {"id": "brand-new", "body": {}}, None)
    assert needs_approval(SNAP, "deployments.put", {"id": "sim-openai-mumbai", "body": {"weight": 3}}, None) is None


def test_an_alias_routed_to_a_provider_it_did_not_use_takes_two() -> None:
    both = ["sim-openai-mumbai", "sim-anthropic-mumbai"]
    assert needs_approval(SNAP, "aliases.put", {"name": "chat-default", "body": {"deployments": both}}, None) is None
    assert needs_approval(SNAP, "aliases.put", {"name": "chat-default", "body": {"deployments": both[:1]}}, None) is None
    reason = needs_approval(SNAP, "aliases.put", {"name": "chat-new", "body": {"deployments": both[:1]}}, None)
    assert reason and "sim-openai" in reason  # a new alias: every provider is new to it
    assert needs_approval(SNAP, "aliases.put", {"name": "chat-new", "body": {"deployments": "x"}}, None) is None


def test_only_a_raise_past_the_threshold_takes_two() -> None:
    def budget(limit: str, threshold: int | None = 100_000 * MICRO, scope: str = "team:platform") -> str | None:
        return needs_approval(SNAP, "budgets.set", {"scope": scope, "body": {"monthly_limit": limit}}, threshold)

    assert budget("60000.00") is None  # a raise (from 50,000) under the threshold
    assert "100000 INR" in (budget("150000.00") or "")  # a raise past it
    assert budget("150000.00", threshold=None) is None  # no threshold configured
    assert budget("400000.00", scope="team:kyc-ops") is None  # a cut from 500,000, though past the threshold
    assert budget("not money") is None  # the change itself refuses it, listing the problem
    assert budget("150000.00", scope="team:new-team")  # no limit before: a raise from nothing
