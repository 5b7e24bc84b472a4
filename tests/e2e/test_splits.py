"""A sticky split end to end through the openai SDK: an alias whose callers are divided 90/10 between two
variants (aliases on different providers) by their ``user``; each caller always reaches the same variant, the
answer names the alias asked for, the events say which variant served (``fb.variant``), and the usage API groups
by it."""

from __future__ import annotations

from collections import Counter
from typing import Iterator

import httpx
import openai
import pytest

from ledger.events import RequestAdmitted, RequestSettled
from proxy.routing.split import choose
from proxy.snapshot import Split, Variant
from tests.harness import Stack, admin_token, read_events, running_stack

pytestmark = pytest.mark.e2e
SERVES = {"current": "sim-openai-mumbai", "candidate": "sim-anthropic-mumbai"}


def with_split(tree: dict) -> None:
    tree["aliases"].append({"name": "chat-split", "kind": "chat", "deployments": ["sim-openai-mumbai"],
                            "split": {"key": "user", "variants": [
                                {"name": "current", "alias": "chat-openai", "weight": 90},
                                {"name": "candidate", "alias": "chat-anthropic", "weight": 10}]}})


@pytest.fixture(scope="module")
def split_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("split"), aliases="chat-split", mutate=with_split) as st:
        yield st


def test_each_caller_sticks_to_one_variant_and_the_events_say_which(split_stack: Stack) -> None:
    served: dict[str, set[str]] = {}
    ids: dict[str, str] = {}
    with openai.OpenAI(base_url=split_stack.gateway_url + "/v1", api_key=split_stack.key, max_retries=0) as client:
        for round_ in range(2):
            for i in range(60):
                user = f"user-{i}"
                raw = client.chat.completions.with_raw_response.create(
                    model="chat-split", user=user, max_tokens=8, messages=[{"role": "user", "content": "hi"}])
                assert raw.parse().model == "chat-split"  # the answer names the alias asked for
                served.setdefault(user, set()).add(raw.headers["x-fb-deployment"])
                ids[raw.headers["x-fb-request-id"]] = user
    assert all(len(deps) == 1 for deps in served.values())  # sticky: one deployment per caller, both rounds
    # the variant each caller must be on: the same hash of the same value (its ``user``) the gateway uses
    split = Split("user", (Variant("current", "chat-openai", 90), Variant("candidate", "chat-anthropic", 10)))
    for user, deps in served.items():
        assert deps == {SERVES[choose(split, "chat-split", f"u:{user}").name]}
    events = [e for e in read_events(split_stack.events_path) if getattr(e, "request_id", None) in ids]
    admitted = {e.request_id: e for e in events if isinstance(e, RequestAdmitted)}
    assert len(admitted) == 120 and {e.alias for e in admitted.values()} == {"chat-split"}
    variants = Counter(e.tags["fb.variant"] for e in admitted.values())
    assert set(variants) == {"current", "candidate"} and variants["current"] > variants["candidate"]
    settled = {e.request_id: e for e in events if isinstance(e, RequestSettled)}
    for rid, e in admitted.items():
        assert settled[rid].deployment == SERVES[e.tags["fb.variant"]]

    # finance sees the variants side by side: the usage API (the same views as ``farebox report showback``)
    token = admin_token(split_stack.config, "fin-split", "finance", live_at=split_stack.gateway_url)
    usage = httpx.get(split_stack.gateway_url + "/admin/v1/usage", params={"by": "alias,variant"}, timeout=60,
                      headers={"Authorization": f"Bearer {token}"})
    assert usage.status_code == 200, usage.text
    rows = {row["variant"]: row for row in usage.json()["data"] if row["alias"] == "chat-split"}
    assert {name: rows[name]["requests"] for name in rows} == dict(variants)
    assert all(int(rows[name]["spend_micro"]) > 0 for name in rows)
