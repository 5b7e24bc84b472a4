"""Two people over the admin API: admin cannot mint an auditor token alone, nor add a deployment, route an alias
to a new provider or raise a budget past the threshold; a different admin approves, both names are audited."""

from __future__ import annotations

from typing import Iterator

import httpx
import pytest

from tests.harness import Stack, admin_token, running_stack

pytestmark = pytest.mark.e2e


def _threshold(tree: dict) -> None:
    tree.setdefault("control_db", {})["approve_budgets_above"] = "1000.00"


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, dict, dict]]:
    with running_stack(tmp_path_factory.mktemp("approvals"), mutate=_threshold) as stack:
        alice = admin_token(stack.config, "alice", "admin", live_at=stack.gateway_url)  # the CLI: break-glass
        bob = admin_token(stack.config, "bob", "admin", live_at=stack.gateway_url)
        yield stack, {"Authorization": f"Bearer {alice}"}, {"Authorization": f"Bearer {bob}"}


def test_an_auditor_token_takes_a_second_admin(two: tuple[Stack, dict, dict]) -> None:
    stack, alice, bob = two
    url = stack.gateway_url + "/admin/v1"
    proposed = httpx.post(url + "/admin-tokens", headers=alice, json={"name": "aud-x", "role": "auditor"})
    assert proposed.status_code == 202, proposed.text
    change = proposed.json()
    assert change["status"] == "pending" and change["proposed_by"] == "alice" and "token" not in change
    assert "aud-x" not in {t["name"] for t in httpx.get(url + "/admin-tokens", headers=alice).json()["data"]}
    self_approved = httpx.post(url + f"/changes/{change['id']}:approve", headers=alice)
    assert self_approved.status_code == 403 and self_approved.json()["error"]["code"] == "two_people_required"
    approved = httpx.post(url + f"/changes/{change['id']}:approve", headers=bob)
    assert approved.status_code == 200, approved.text
    body = approved.json()
    assert body["status"] == "approved" and body["decided_by"] == "bob"
    token = body["result"]["token"]
    again = httpx.post(url + f"/changes/{change['id']}:approve", headers=bob)
    assert again.status_code == 409  # runs once
    audited = httpx.get(stack.gateway_url + "/admin/v1/audit?limit=50",
                        headers={"Authorization": f"Bearer {token}"})  # the new auditor token works
    assert audited.status_code == 200, audited.text
    row = next(r for r in audited.json()["data"] if r["action"] == "admin_tokens.create" and r["outcome"] == "ok"
               and r["object"] == "admin_token:aud-x")
    assert row["actor"] == "alice" and row["approved_by"] == "bob"
    listed = httpx.get(url + "/changes", headers=alice).json()["data"]
    stored = next(c for c in listed if c["id"] == change["id"])
    assert stored["status"] == "approved" and token not in str(stored)  # the plaintext is never kept


def test_a_new_deployment_and_a_new_provider_on_an_alias_wait_for_approval(two: tuple[Stack, dict, dict]) -> None:
    stack, alice, bob = two
    url = stack.gateway_url + "/admin/v1"
    deps = {d["id"]: d for d in httpx.get(url + "/deployments", headers=alice).json()["data"]}
    base = deps["sim-openai-mumbai"]
    spec = {k: v for k, v in base.items() if k not in ("id", "price_version")}
    spec["price_per_1m"] = {"currency": "USD", "input": "2.00", "output": "10.00"}
    added = httpx.put(url + "/deployments/sim-openai-second", headers=alice, json=spec)
    assert added.status_code == 202, added.text
    bad = httpx.put(url + "/deployments/sim-broken", headers=alice, json={"dialect": "klingon"})
    assert bad.status_code == 400  # a proposal that could never apply is refused at once
    approved = httpx.post(url + f"/changes/{added.json()['id']}:approve", headers=bob)
    assert approved.status_code == 200, approved.text
    assert "sim-openai-second" in {d["id"] for d in httpx.get(url + "/deployments", headers=alice).json()["data"]}
    same_provider = httpx.put(url + "/aliases/chat-openai", headers=alice,
                              json={"kind": "chat", "deployments": ["sim-openai-mumbai", "sim-openai-second"]})
    assert same_provider.status_code == 200, same_provider.text  # the same provider: one admin may
    new_provider = httpx.put(url + "/aliases/chat-openai", headers=alice,
                             json={"kind": "chat", "deployments": ["sim-openai-mumbai", "sim-anthropic-mumbai"]})
    assert new_provider.status_code == 202 and "sim-anthropic" in new_provider.json()["reason"]
    rejected = httpx.post(url + f"/changes/{new_provider.json()['id']}:reject", headers=bob)
    assert rejected.status_code == 200 and rejected.json()["status"] == "rejected"
    alias = next(a for a in httpx.get(url + "/aliases", headers=alice).json()["data"] if a["name"] == "chat-openai")
    assert alias["deployments"] == ["sim-openai-mumbai", "sim-openai-second"]


def test_raising_a_budget_past_the_threshold_waits_a_cut_does_not(two: tuple[Stack, dict, dict]) -> None:
    stack, alice, bob = two
    url = stack.gateway_url + "/admin/v1/budgets/team:kyc-ops"
    small = httpx.put(url, headers=alice, json={"monthly_limit": "900.00"})
    assert small.status_code == 200, small.text  # under the threshold
    big = httpx.put(url, headers=alice, json={"monthly_limit": "5000.00"})
    assert big.status_code == 202 and "1000" in big.json()["reason"], big.text
    assert httpx.get(url, headers=alice).json()["limit"] == "900.000000"
    approved = httpx.post(stack.gateway_url + f"/admin/v1/changes/{big.json()['id']}:approve", headers=bob)
    assert approved.status_code == 200, approved.text
    assert httpx.get(url, headers=alice).json()["limit"] == "5000.000000"
    cut = httpx.put(url, headers=alice, json={"monthly_limit": "2000.00"})
    assert cut.status_code == 200, cut.text  # lowering needs nobody else
