"""The exact response cache end to end with the official openai SDK against a real gateway process.

Every test sends ``x-fb-cache: on`` (the example's aliases do not opt in) and a prompt with a fresh marker,
and counts the upstream calls at the simulator (``GET /_sim/requests``). Done means (issue 16): a repeat is a
hit with 0 upstream calls, streamed and not, embeddings too; 100 concurrent identical misses make one
upstream call; the hit is in the events and its saving in the warehouse.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import httpx
import openai
import pytest

from ledger.events import RequestSettled
from reconcile.warehouse import Warehouse
from streams.archive.write import archive_from_log
from streams.sqlite_log import SqliteEventLog
from tests.harness import Stack, read_events

pytestmark = pytest.mark.e2e

ON = {"x-fb-cache": "on"}


def upstream_calls(stack: Stack, marker: str) -> int:
    data = httpx.get(f"{stack.sim_url}/_sim/requests", params={"n": 256}).json()["data"]
    return sum(1 for e in data if marker in str(e.get("body")))


def settled(stack: Stack, *request_ids: str) -> dict[str, RequestSettled]:
    deadline = time.monotonic() + 5
    while True:
        found = {e.request_id: e for e in read_events(stack.events_path)
                 if isinstance(e, RequestSettled) and e.request_id in request_ids}
        if len(found) == len(request_ids) or time.monotonic() > deadline:
            assert set(found) == set(request_ids)
            return found
        time.sleep(0.05)


def ask(client: openai.OpenAI, marker: str, **kw):  # type: ignore[no-untyped-def]
    return client.chat.completions.with_raw_response.create(
        model="chat-openai", messages=[{"role": "user", "content": f"[{marker}] Name a colour."}],
        max_completion_tokens=40, temperature=0, extra_headers=ON, **kw)


async def _archive(events: Path, root: Path) -> None:
    log = SqliteEventLog.open(events, readonly=True)
    try:
        await archive_from_log(log, root)
    finally:
        await log.close()


def test_a_repeat_is_a_hit_with_no_upstream_call_in_the_events_and_the_warehouse(
        stack: Stack, client: openai.OpenAI, tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    first, again = ask(client, marker), ask(client, marker)
    assert (first.headers["x-fb-cache"], again.headers["x-fb-cache"]) == ("miss", "hit")
    miss, hit = first.parse(), again.parse()
    assert hit.choices[0].message.content == miss.choices[0].message.content
    assert upstream_calls(stack, marker) == 1
    rids = first.headers["x-fb-request-id"], again.headers["x-fb-request-id"]
    events = settled(stack, *rids)
    fetched, served = events[rids[0]], events[rids[1]]
    assert served.cache_hit and served.cost_micro == 0 and served.attempts == 0
    assert served.cache_saved_micro == fetched.cost_micro > 0 and not fetched.cache_hit
    asyncio.run(_archive(stack.events_path, tmp_path / "archive"))
    with Warehouse(tmp_path / "archive") as wh:
        rows = {r["request_id"]: r for r in wh.query(
            "SELECT request_id, cost_micro, cache_hit, cache_saved_micro FROM requests "
            f"WHERE request_id IN ('{rids[0]}', '{rids[1]}')").dicts()}
    assert rows[rids[1]] == {"request_id": rids[1], "cost_micro": 0, "cache_hit": True,
                             "cache_saved_micro": fetched.cost_micro}
    assert rows[rids[0]]["cache_saved_micro"] == 0


def test_a_stream_is_replayed_as_a_stream(stack: Stack, client: openai.OpenAI) -> None:
    marker = uuid.uuid4().hex
    texts, headers = [], []
    for _ in range(2):
        raw = ask(client, marker, stream=True, stream_options={"include_usage": True})
        headers.append(raw.headers["x-fb-cache"])
        chunks = list(raw.parse())
        texts.append("".join(c.choices[0].delta.content or "" for c in chunks if c.choices))
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    assert headers == ["miss", "hit"] and texts[0] == texts[1] != ""
    assert upstream_calls(stack, marker) == 1


def test_embeddings_are_cached(stack: Stack, embed_only_key: str) -> None:
    marker = uuid.uuid4().hex
    with openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=embed_only_key, max_retries=0) as c:
        got = [c.embeddings.with_raw_response.create(model="embed-default", input=[f"{marker} a", f"{marker} b"],
                                                     extra_headers=ON) for _ in range(2)]
    assert [g.headers["x-fb-cache"] for g in got] == ["miss", "hit"]
    assert [d.embedding for d in got[0].parse().data] == [d.embedding for d in got[1].parse().data]
    assert upstream_calls(stack, marker) == 1


def test_100_concurrent_identical_misses_make_one_upstream_call(stack: Stack) -> None:
    marker = uuid.uuid4().hex

    async def main() -> list[str]:
        async with openai.AsyncOpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key, max_retries=0) as c:
            async def one() -> str:
                raw = await c.chat.completions.with_raw_response.create(
                    model="chat-openai", messages=[{"role": "user", "content": f"[{marker}] Name a colour."}],
                    max_completion_tokens=40, temperature=0, extra_headers={**ON, "x-sim-ttft-ms": "300"})
                return raw.headers["x-fb-cache"]
            return await asyncio.gather(*(one() for _ in range(100)))

    outcomes = asyncio.run(main())
    assert sorted(outcomes).count("hit") == 99 and outcomes.count("miss") == 1
    assert upstream_calls(stack, marker) == 1
