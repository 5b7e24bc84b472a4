"""Opt-in encrypted body logging: sealed per team, kept for the retention then swept, read by auditors only,
every read audited; wired into the request path through the same step as the response cache.

The request-path tests run the real aiohttp app over fake ports with the simulator in the same loop and a
real config database (SQLite) for the audit log.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
import sqlalchemy as sa
from aiohttp.test_utils import TestClient, TestServer

from farebox.pod import pod_app
from infra.simulator.app import create_app as create_simulator
from infra.simulator.config import parse_config
from proxy.bodylog import BodyLog, BodyStore, TeamCipher
from proxy.bodylog.cipher import SealError
from proxy.control.db import migrate
from proxy.control.db.store import ConfigDB
from proxy.control.declarative import compile_snapshot
from proxy.control.keys import mint_admin_token
from proxy.control.service import ControlService
from proxy.runtime import Runtime
from tests.proxy.fakes import MemoryLog, example_tree, key, runtime

MASTER = b"m" * 32
SIMULATOR = {"accounts": [{"name": "acct-retail", "api_key": "sk-sim-openai-retail-0001"},
                          {"name": "acct-retail-anthropic", "api_key": "sk-sim-anthropic-retail-0001"}],
             "defaults": {"ttft_ms": 0, "tokens_per_s": 0, "output_tokens": 12}}
pytestmark = pytest.mark.filterwarnings("ignore::aiohttp.web_exceptions.NotAppKeyWarning")


def test_a_team_key_opens_only_its_own_rows_of_its_own_request() -> None:
    cipher = TeamCipher(MASTER)
    sealed = cipher.seal("payments", "req_1", b'{"secret": "4111 1111 1111 1111"}')
    assert b"4111" not in sealed
    assert cipher.open("payments", "req_1", sealed) == b'{"secret": "4111 1111 1111 1111"}'
    for team, rid in (("search", "req_1"), ("payments", "req_2")):  # another team's key, a moved row
        with pytest.raises(SealError):
            cipher.open(team, rid, sealed)
    with pytest.raises(SealError):
        TeamCipher(b"o" * 32).open("payments", "req_1", sealed)  # another master key
    with pytest.raises(ValueError):
        TeamCipher(b"short")


async def test_bodies_are_stored_sealed_read_back_and_swept_after_retention(tmp_path: Path) -> None:
    now = [1_800_000_000.0]
    store = BodyStore(f"sqlite:///{tmp_path / 'bodies.sqlite'}")
    log = BodyLog(store, TeamCipher(MASTER), clock=lambda: now[0], retention_s=30 * 86_400)
    log.record("payments", "req_old", {"messages": [{"role": "user", "content": "asha@example.com"}]},
               {"choices": [{"message": {"content": "ok"}}]})
    assert await log.flush() == 1 and store.count() == 1
    with store.engine.connect() as conn:
        raw = conn.execute(sa.text("SELECT sealed FROM body_log")).scalar_one()
    assert b"asha@example.com" not in bytes(raw)  # at rest: sealed only
    found = await log.read("req_old")
    assert found is not None and found["team"] == "payments"
    assert found["request"]["messages"][0]["content"] == "asha@example.com"
    now[0] += 29 * 86_400
    log.record("payments", "req_new", {"input": "x"}, {"data": []})
    await log.flush()
    assert await log.sweep() == 0
    now[0] += 2 * 86_400  # req_old is 31 days old, req_new 2
    assert await log.sweep() == 1
    assert await log.read("req_old") is None and await log.read("req_new") is not None
    await log.close()


async def test_a_full_queue_drops_and_counts_instead_of_blocking(tmp_path: Path) -> None:
    log = BodyLog(BodyStore(f"sqlite:///{tmp_path / 'b.sqlite'}"), TeamCipher(MASTER), max_pending=2)
    for i in range(3):
        log.record("t", f"r{i}", {}, {})
    assert log.dropped == 1 and await log.flush() == 2
    await log.close()


class Pod:
    def __init__(self, client: TestClient, rt: Runtime, db: ConfigDB, auth: str, tokens: dict[str, str]) -> None:
        self.client, self.rt, self.db, self.tokens = client, rt, db, tokens
        self.auth = {"Authorization": f"Bearer {auth}"}

    async def chat(self, text: str, **extra: object):  # type: ignore[no-untyped-def]
        body = {"model": "chat-default", "messages": [{"role": "user", "content": text}],
                "max_completion_tokens": 32, **extra}
        return await self.client.post("/v1/chat/completions", data=orjson.dumps(body), headers=self.auth)

    async def read(self, request_id: str, role: str):  # type: ignore[no-untyped-def]
        return await self.client.get(f"/admin/v1/bodies/{request_id}",
                                     headers={"Authorization": f"Bearer {self.tokens[role]}"})

    def audit(self) -> list[tuple[str, str, str, str]]:
        return [(a["actor"], a["action"], a["object"], a["outcome"]) for a in reversed(self.db.audit(100, "body:"))]


@pytest.fixture
async def pod(tmp_path: Path) -> AsyncIterator[Pod]:
    sim = TestServer(create_simulator(parse_config(SIMULATOR)))
    await sim.start_server()
    tree = example_tree(str(sim.make_url("")).rstrip("/"))
    for team in tree["teams"]:
        team["body_log"] = team["name"] == "platform"
    plaintext, record = key()
    tokens, stored = {}, []
    for role in ("auditor", "admin", "finance"):
        minted = mint_admin_token(name=f"t-{role}", role=role, now_iso="2026-01-01T00:00:00Z")
        tokens[role], _ = minted.plaintext, stored.append(minted.record)
    snap = compile_snapshot(tree, [record], stored_admin_tokens=stored)
    assert snap is not None
    db = ConfigDB(f"sqlite:///{tmp_path / 'control.sqlite'}")
    migrate.upgrade(db.engine)
    base = runtime(snap, log=MemoryLog(), clock=time.time)
    body_log = BodyLog(BodyStore(f"sqlite:///{tmp_path / 'bodies.sqlite'}"), TeamCipher(MASTER))
    rt = Runtime(pod=base.pod, secrets=base.secrets, options=base.options, recorder=base.recorder,
                 budgets=base.budgets, limits=base.limits, upstream=base.upstream, control=ControlService(db),
                 clock=time.time, body_log=body_log)
    client = TestClient(TestServer(pod_app(rt)))
    await client.start_server()
    yield Pod(client, rt, db, plaintext, tokens)
    await client.close()
    await sim.close()
    await body_log.close()
    db.close()


async def test_an_opted_in_teams_bodies_are_logged_and_read_by_auditors_only_each_read_audited(pod: Pod) -> None:
    marker = uuid.uuid4().hex
    text = f"[{marker}] what is on my order?"
    resp = await pod.chat(text)
    answer = await resp.json()
    rid = answer["x_farebox"]["request_id"]
    stream = await pod.chat(text, stream=True)
    await stream.read()
    srid = stream.headers["x-fb-request-id"]
    assert pod.rt.body_log is not None
    assert await pod.rt.body_log.flush() == 2
    assert marker not in repr(pod.rt.recorder.log.events)  # bodies never reach the events
    for role in ("admin", "finance"):
        denied = await pod.read(rid, role)
        assert denied.status == 403 and (await denied.json())["error"]["code"] == "insufficient_role"
    read = await pod.read(rid, "auditor")
    found = await read.json()
    assert read.status == 200, found
    assert found["team"] == "platform" and found["request"]["messages"][0]["content"] == text
    assert found["answer"]["choices"] == answer["choices"]
    streamed = await (await pod.read(srid, "auditor")).json()
    assert streamed["answer"]["choices"][0]["message"]["content"]  # the stream's answer, assembled
    assert (await pod.read("req_unknown", "auditor")).status == 404
    assert pod.audit() == [("t-admin", "bodies.read", f"body:{rid}", "denied"),
                           ("t-finance", "bodies.read", f"body:{rid}", "denied"),
                           ("t-auditor", "bodies.read", f"body:{rid}", "ok"),
                           ("t-auditor", "bodies.read", f"body:{srid}", "ok"),
                           ("t-auditor", "bodies.read", "body:req_unknown", "ok")]


async def test_a_team_that_did_not_opt_in_logs_nothing(pod: Pod) -> None:
    snap = pod.rt.pod.snapshot
    teams = {**snap.teams, "platform": replace(snap.teams["platform"], body_log=False)}
    pod.rt.pod.swap(replace(snap, teams=teams))
    assert (await pod.chat("hello")).status == 200
    assert pod.rt.body_log is not None and await pod.rt.body_log.flush() == 0
