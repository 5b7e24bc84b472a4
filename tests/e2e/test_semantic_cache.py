"""The semantic cache end to end with the official openai SDK against real simulator and gateway processes.

The stack's ``chat-faq`` alias opts in (``cache.semantic`` through ``embed-default``). The simulator embeds
texts that differ only in case, punctuation and spacing identically, so asking the same question again in
other case and punctuation is a semantic hit (the exact cache misses it); the model's semantic quality is
``make bench-privacy``'s job. Upstream calls are counted at the simulator per path (``GET /_sim/requests``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from ledger.events import RequestAdmitted, RequestSettled
from reconcile.warehouse import Warehouse
from streams.archive.write import archive_from_log
from streams.sqlite_log import SqliteEventLog
from tests.harness import Stack, admin_token, read_events, running_stack

pytestmark = pytest.mark.e2e


def faq_alias(tree: dict) -> None:
    tree["aliases"].append({"name": "chat-faq", "kind": "chat", "deployments": ["sim-openai-mumbai"],
                            "cache": {"semantic": {"embeddings_alias": "embed-default", "threshold": "0.95"}}})


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("semantic"), aliases="chat-faq", mutate=faq_alias) as st:
        yield st


@pytest.fixture(scope="module")
def client(stack: Stack) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key, max_retries=0) as c:
        yield c


def calls(stack: Stack, marker: str) -> dict[str, int]:
    data = httpx.get(f"{stack.sim_url}/_sim/requests", params={"n": 256}).json()["data"]
    out = {"chat": 0, "embeddings": 0}
    for e in data:
        if marker in str(e.get("body")).lower():
            out["embeddings" if e["path"].endswith("/embeddings") else "chat"] += 1
    return out


def ask(client: openai.OpenAI, text: str, **kw):  # type: ignore[no-untyped-def]
    return client.chat.completions.with_raw_response.create(
        model="chat-faq", messages=[{"role": "system", "content": "You answer HR questions for Acme."},
                                    {"role": "user", "content": text}],
        max_completion_tokens=40, temperature=0, **kw)


def events_of(stack: Stack, *request_ids: str) -> dict[tuple[str, str], object]:
    """(request id, event type) -> event, once every request given is settled (the log is written async)."""
    deadline = time.monotonic() + 5
    while True:
        found = {(e.request_id, e.type): e for e in read_events(stack.events_path)
                 if getattr(e, "request_id", None) in request_ids}
        if all((r, "request.settled") in found for r in request_ids) or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


async def _archive(events: Path, root: Path) -> None:
    log = SqliteEventLog.open(events, readonly=True)
    try:
        await archive_from_log(log, root)
    finally:
        await log.close()


def test_the_same_question_again_is_a_semantic_hit_its_embedding_charged_to_the_team(
        stack: Stack, client: openai.OpenAI, tmp_path: Path) -> None:
    m = uuid.uuid4().hex
    first = ask(client, f"[{m}] How many days of annual leave do I get?")
    again = ask(client, f"[{m}] HOW MANY DAYS OF ANNUAL LEAVE DO I GET")
    assert first.headers["x-fb-cache"] == "miss"
    assert (again.headers["x-fb-cache"], again.headers["x-fb-cache-kind"]) == ("hit", "semantic")
    assert again.parse().choices[0].message.content == first.parse().choices[0].message.content
    assert calls(stack, m) == {"chat": 1, "embeddings": 2}  # no extra chat call; each request embedded once
    rids = first.headers["x-fb-request-id"], again.headers["x-fb-request-id"]
    embeds = tuple(f"{r}.semantic" for r in rids)
    ev = events_of(stack, *rids, *embeds)
    hit = ev[(rids[1], "request.settled")]
    assert isinstance(hit, RequestSettled) and hit.cache_hit and hit.cache_kind == "semantic"
    assert hit.cache_similarity == again.headers["x-fb-cache-similarity"] and hit.cost_micro == 0
    fetched = ev[(rids[0], "request.settled")]
    assert hit.cache_saved_micro == fetched.cost_micro > 0  # type: ignore[attr-defined]
    for embed, owner in zip(embeds, rids):
        admitted, paid = ev[(embed, "request.admitted")], ev[(embed, "request.settled")]
        assert isinstance(admitted, RequestAdmitted) and isinstance(paid, RequestSettled)
        assert (admitted.team, admitted.alias) == ("platform", "embed-default")
        assert admitted.tags == {"fb.cache": "semantic", "fb.cache_for": owner}
        assert paid.final_status == 200 and paid.cost_micro > 0 and "team:platform" in paid.cost_by_scope
    asyncio.run(_archive(stack.events_path, tmp_path / "archive"))
    with Warehouse(tmp_path / "archive") as wh:
        row = wh.query(
            "SELECT count(*) AS n, sum(cost_micro) AS cost FROM requests "
            f"WHERE map_extract(tags, 'fb.cache') = ['semantic'] AND request_id IN ('{embeds[0]}', '{embeds[1]}')"
        ).dicts()[0]
        saved = wh.query(f"SELECT cache_saved_micro FROM requests WHERE request_id = '{rids[1]}'").dicts()[0]
    assert row == {"n": 2, "cost": sum(ev[(e, "request.settled")].cost_micro for e in embeds)}  # type: ignore[attr-defined]
    assert saved["cache_saved_micro"] == fetched.cost_micro  # type: ignore[attr-defined]


def test_a_different_question_is_a_miss(stack: Stack, client: openai.OpenAI) -> None:
    m = uuid.uuid4().hex
    ask(client, f"[{m}] How many days of annual leave do I get?")
    other = ask(client, f"[{m}] Who approves my travel expenses?")
    assert other.headers["x-fb-cache"] == "miss" and "x-fb-cache-kind" not in other.headers
    assert calls(stack, m) == {"chat": 2, "embeddings": 2}


def test_a_verbatim_repeat_is_an_exact_hit_with_no_embedding(stack: Stack, client: openai.OpenAI) -> None:
    m = uuid.uuid4().hex
    ask(client, f"[{m}] Where is the holiday calendar?")
    repeat = ask(client, f"[{m}] Where is the holiday calendar?")
    assert (repeat.headers["x-fb-cache"], repeat.headers["x-fb-cache-kind"]) == ("hit", "exact")
    assert calls(stack, m) == {"chat": 1, "embeddings": 1}


def test_a_semantic_hit_is_replayed_as_a_stream(stack: Stack, client: openai.OpenAI) -> None:
    m = uuid.uuid4().hex
    texts, kinds = [], []
    for text in (f"[{m}] Where do I find my payslip?", f"[{m}] where do i find my payslip"):
        raw = ask(client, text, stream=True, stream_options={"include_usage": True})
        kinds.append(raw.headers.get("x-fb-cache-kind", raw.headers["x-fb-cache"]))
        chunks = list(raw.parse())
        texts.append("".join(c.choices[0].delta.content or "" for c in chunks if c.choices))
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    assert kinds == ["miss", "semantic"] and texts[0] == texts[1] != ""
    assert calls(stack, m)["chat"] == 1


def test_no_store_is_never_embedded(stack: Stack, client: openai.OpenAI) -> None:
    m = uuid.uuid4().hex
    for text in (f"[{m}] What is the notice period?", f"[{m}] what is the notice period"):
        raw = ask(client, text, extra_headers={"Cache-Control": "no-store"})
        assert (raw.headers["x-fb-cache"], raw.headers["x-fb-cache-reason"]) == ("bypass", "no_store")
    assert calls(stack, m) == {"chat": 2, "embeddings": 0}


def test_the_admin_api_shows_the_alias_semantic_cache(stack: Stack) -> None:
    token = admin_token(stack.config, "semantic-auditor", "auditor", live_at=stack.gateway_url)
    data = httpx.get(stack.gateway_url + "/admin/v1/aliases", headers={"Authorization": f"Bearer {token}"}).json()
    views = {a["name"]: a["cache"] for a in data["data"]}
    assert views["chat-faq"] == {"exact": False, "semantic": {"embeddings_alias": "embed-default",
                                                              "threshold": "0.95", "ttl_s": 86400}}
    assert views["chat-openai"] == {"exact": False, "semantic": None}
