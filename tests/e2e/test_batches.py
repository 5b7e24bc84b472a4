"""Batches end to end through the official ``openai`` SDK: upload a JSONL of 200 lines, create a batch, poll,
download the results; every line billed exactly once at the batch price (the alias asks OpenAI's flex tier for
batch work; worked out by hand here from the price book), retrieving twice bills nothing more, and a batch cancelled mid-way keeps and bills what ran and
runs nothing more. Bad input is refused in the Files and Batches API's own shapes."""

from __future__ import annotations

import contextlib
import io
import json
import sqlite3
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Iterator

import anthropic
import httpx
import openai
import pytest

from ledger.events import HoldExpired, RequestAdmitted, RequestAttempted, RequestSettled
from tests.batch_lines import tagging_batch
from tests.harness import Stack, admin_token, mint, read_events, running_stack, wait_key_live

pytestmark = pytest.mark.e2e
# sim-openai-mumbai's flex tier per 1M (input, cached, output): chat-openai's batch_service_tier (tests/harness.py)
PRICE = (Decimal("1.00"), Decimal("0.10"), Decimal("5.00"))
INR_PER_USD = 88


def _wait(client: openai.OpenAI, batch_id: str, until: tuple[str, ...], timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while True:
        batch = client.batches.retrieve(batch_id)
        if batch.status in until or time.monotonic() > deadline:
            return batch
        time.sleep(0.2)


def _by_batch(events: list, batch_id: str) -> dict[type, list]:
    mine = {e.request_id for e in events if isinstance(e, RequestAdmitted) and e.tags.get("fb.batch") == batch_id}
    out: dict[type, list] = {RequestAdmitted: [], RequestAttempted: [], RequestSettled: []}
    for e in events:
        if type(e) in out and e.request_id in mine:
            out[type(e)].append(e)
    return out


def _cli(*argv: str) -> tuple[int, str]:
    """``farebox *argv`` run in this process (its own event loop, in a thread), and what it printed."""
    from farebox.cli import main

    out = io.StringIO()

    def run() -> int:
        with contextlib.redirect_stdout(out):
            return main(list(argv))

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(run).result(), out.getvalue()


def _by_hand(usage) -> int:
    usd = (usage.input * PRICE[0] + usage.cached_input * PRICE[1] + (usage.output + usage.reasoning) * PRICE[2]) \
        / 1_000_000
    return int((usd * INR_PER_USD * 1_000_000).to_integral_value(rounding="ROUND_CEILING"))


def test_a_batch_of_200_lines_runs_and_bills_each_line_once(client: openai.OpenAI, stack: Stack) -> None:
    uploaded = client.files.create(file=("tickets.jsonl", io.BytesIO(tagging_batch(200))), purpose="batch")
    assert uploaded.purpose == "batch" and uploaded.bytes == len(tagging_batch(200))
    assert client.files.retrieve(uploaded.id).filename == "tickets.jsonl"
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                  completion_window="24h", metadata={"job": "nightly-tagger"})
    assert batch.status == "in_progress" and batch.metadata == {"job": "nightly-tagger"}
    done = _wait(client, batch.id, ("completed", "failed", "expired", "cancelled"))
    assert done.status == "completed", done
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (200, 200, 0)
    assert done.error_file_id is None
    lines = [json.loads(line) for line in client.files.content(done.output_file_id).text.splitlines()]
    assert sorted(line["custom_id"] for line in lines) == sorted(f"line-{i}" for i in range(200))
    assert all(line["response"]["status_code"] == 200 and line["error"] is None for line in lines)
    assert all(line["response"]["body"]["choices"][0]["message"]["content"] for line in lines)

    events = _by_batch(read_events(stack.events_path), batch.id)
    settled = {e.request_id: e for e in events[RequestSettled]}
    assert len(events[RequestAdmitted]) == len(settled) == len(events[RequestSettled]) == 200  # each once
    assert {line["response"]["request_id"] for line in lines} == set(settled)
    for attempt in events[RequestAttempted]:  # the batch price (flex, as served), worked out by hand
        assert attempt.outcome == "ok" and attempt.usage.service_tier == "flex"
        assert attempt.cost_micro == _by_hand(attempt.usage)
        assert settled[attempt.request_id].cost_micro == attempt.cost_micro

    for _ in range(2):  # reading the batch and its results again bills nothing
        assert client.batches.retrieve(batch.id).status == "completed"
        client.files.content(done.output_file_id).read()
    time.sleep(0.5)
    again = _by_batch(read_events(stack.events_path), batch.id)
    assert len(again[RequestSettled]) == 200 and len(again[RequestAdmitted]) == 200
    assert batch.id in [b.id for b in client.batches.list(limit=100).data]

    # finance sees it: the admin API and the CLI, with what its lines cost (the sum of their settled costs)
    token = admin_token(stack.config, "fin-batches", "finance", live_at=stack.gateway_url)
    with urllib.request.urlopen(urllib.request.Request(stack.gateway_url + f"/admin/v1/batches/{batch.id}",
                                                       headers={"Authorization": f"Bearer {token}"})) as resp:
        seen = json.loads(resp.read())
    assert seen["team"] == "platform" and seen["request_counts"]["completed"] == 200
    assert seen["x_farebox"]["cost_micro"] == sum(e.cost_micro for e in settled.values())
    assert seen["x_farebox"]["via"] == "gateway" and seen["x_farebox"]["saved_micro"] > 0  # flex against standard
    code, out = _cli("batches", "list", "--config", str(stack.config), "--team", "platform", "--json")
    assert code == 0 and [b for b in json.loads(out) if b["id"] == batch.id][0]["status"] == "completed"
    assert _cli("batches", "show", "batch_nope", "--config", str(stack.config))[0] == 2


def test_a_bad_file_fails_the_batch_with_every_problem_and_runs_nothing(client: openai.OpenAI) -> None:
    bad = tagging_batch(3) + b"not json\n" + json.dumps({"custom_id": "line-0", "method": "POST",
                                                  "url": "/v1/chat/completions",
                                                  "body": {"model": "chat-openai", "messages": []}}).encode() + b"\n"
    uploaded = client.files.create(file=("bad.jsonl", io.BytesIO(bad)), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                  completion_window="24h")
    assert batch.status == "failed" and batch.request_counts.total == 0
    assert [(e.code, e.line) for e in batch.errors.data] == [("invalid_json_line", 4), ("duplicate_custom_id", 5)]
    unknown = client.files.create(file=("x.jsonl", io.BytesIO(tagging_batch(2, model="no-such-model"))), purpose="batch")
    failed = client.batches.create(input_file_id=unknown.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert failed.status == "failed" and failed.errors.data[0].code == "model_not_found"


def test_files_and_batches_refuse_bad_input_in_their_own_shape(client: openai.OpenAI, stack: Stack) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.files.create(file=("x.jsonl", io.BytesIO(b"{}")), purpose="fine-tune")
    assert refused.value.body["param"] == "purpose"
    uploaded = client.files.create(file=("x.jsonl", io.BytesIO(tagging_batch(1))), purpose="batch")
    with pytest.raises(openai.BadRequestError) as refused:
        client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="1h")
    assert refused.value.body["param"] == "completion_window"
    with pytest.raises(openai.NotFoundError):
        client.batches.create(input_file_id="file-nope", endpoint="/v1/chat/completions", completion_window="24h")
    with pytest.raises(openai.NotFoundError):
        client.batches.retrieve("batch_nope")
    other = mint(stack.config, "kyc-ops", "kyc-summariser", "chat-openai")
    wait_key_live(stack.gateway_url, other)
    with openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=other, max_retries=0) as stranger:
        with pytest.raises(openai.NotFoundError):  # another team's file: as if it did not exist
            stranger.files.retrieve(uploaded.id)
        assert uploaded.id not in [f.id for f in stranger.files.list().data]
    for content_type, body in (("multipart/form-data", b"garbage"),  # no boundary
                               ("multipart/form-data; boundary=xyz", b"--nope\r\nbroken")):
        bad = httpx.post(stack.gateway_url + "/v1/files", content=body, timeout=10,
                         headers={"Authorization": f"Bearer {stack.key}", "Content-Type": content_type})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_content_type", bad.text
    deleted = client.files.delete(uploaded.id)
    assert deleted.deleted is True
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(uploaded.id)
    with pytest.raises(openai.BadRequestError) as refused:  # farebox's own tags are not a caller's
        client.chat.completions.create(model="chat-openai", messages=[{"role": "user", "content": "x"}],
                                       extra_headers={"x-fb-tags": "fb.batch=batch_forged"})
    assert refused.value.body["param"] == "x-fb-tags"


@pytest.fixture(scope="module")
def slow_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    def mutate(tree: dict) -> None:
        tree["batches"] = {"concurrency": 2, "claim_s": 3}  # a killed gateway's lines are free again within 3 s

    with running_stack(tmp_path_factory.mktemp("slow"), aliases="chat-openai", mutate=mutate,
                       sim_defaults={"ttft_ms": 150}) as st:
        yield st


def test_a_batch_cancelled_midway_keeps_and_bills_what_ran_and_runs_nothing_more(slow_stack: Stack) -> None:
    with openai.OpenAI(base_url=slow_stack.gateway_url + "/v1", api_key=slow_stack.key, max_retries=0) as client:
        uploaded = client.files.create(file=("many.jsonl", io.BytesIO(tagging_batch(200))), purpose="batch")
        batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                      completion_window="24h")
        deadline = time.monotonic() + 30
        while client.batches.retrieve(batch.id).request_counts.completed < 6 and time.monotonic() < deadline:
            time.sleep(0.1)
        cancelling = client.batches.cancel(batch.id)
        assert cancelling.status in ("cancelling", "cancelled")
        ended = _wait(client, batch.id, ("cancelled",), timeout=30)
        assert ended.status == "cancelled" and ended.cancelled_at is not None
        ran = ended.request_counts.completed
        assert 6 <= ran < 200
        lines = client.files.content(ended.output_file_id).text.splitlines()
        assert len(lines) == ran
        time.sleep(1.5)  # nothing more runs after the batch is cancelled
        events = _by_batch(read_events(slow_stack.events_path), batch.id)
        # admitted whole: every line held at creation; what ran settled at its cost, the rest released at nothing
        assert len(events[RequestAdmitted]) == len(events[RequestSettled]) == 200  # no hold left open
        charged = [e for e in events[RequestSettled] if e.attempts]
        released = [e for e in events[RequestSettled] if not e.attempts]
        assert len(charged) == ran and all(e.cost_micro > 0 for e in charged)
        assert len(released) == 200 - ran
        assert all(e.cost_micro == 0 and e.final_status == 499 for e in released)
        assert client.batches.retrieve(batch.id).request_counts.completed == ran
    token = admin_token(slow_stack.config, "fin-cancel", "finance", live_at=slow_stack.gateway_url)
    with urllib.request.urlopen(urllib.request.Request(slow_stack.gateway_url + "/admin/v1/budgets/team:platform",
                                                       headers={"Authorization": f"Bearer {token}"})) as resp:
        assert json.loads(resp.read())["held_micro"] == 0  # the unrun lines' holds are back


def test_a_gateway_killed_mid_batch_resumes_and_no_line_runs_or_bills_twice(slow_stack: Stack) -> None:
    with openai.OpenAI(base_url=slow_stack.gateway_url + "/v1", api_key=slow_stack.key, max_retries=0) as client:
        uploaded = client.files.create(file=("kill.jsonl", io.BytesIO(tagging_batch(40))), purpose="batch")
        batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                      completion_window="24h")
        deadline = time.monotonic() + 30
        while client.batches.retrieve(batch.id).request_counts.completed < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        slow_stack.restart_gateway(kill=True)  # kill -9 with two lines in flight, then start again
        done = _wait(client, batch.id, ("completed", "failed", "expired", "cancelled"), timeout=90)
        assert done.status == "completed" and done.request_counts.completed == 40
        lines = [json.loads(line) for line in client.files.content(done.output_file_id).text.splitlines()]
        assert sorted(line["custom_id"] for line in lines) == sorted(f"line-{i}" for i in range(40))  # each once
    with sqlite3.connect(slow_stack.folder / "batches.sqlite") as db:  # the kill caught lines in flight
        (again,) = db.execute("SELECT count(*) FROM fb_batch_lines WHERE batch_id = ? AND claims > 1",
                              (batch.id,)).fetchone()
    assert again >= 1
    events = read_events(slow_stack.events_path)
    mine = _by_batch(events, batch.id)
    assert len({e.request_id for e in mine[RequestSettled]}) == 40
    assert not [e for e in events if isinstance(e, HoldExpired)]
    token = admin_token(slow_stack.config, "fin", "finance", live_at=slow_stack.gateway_url)
    with urllib.request.urlopen(urllib.request.Request(
            slow_stack.gateway_url + "/admin/v1/budgets/team:platform",
            headers={"Authorization": f"Bearer {token}"})) as resp:
        budget = json.loads(resp.read())
    # every line's hold was replaced by one charge: nothing left held, the team charged the settled costs once
    assert budget["held_micro"] == 0
    assert budget["settled_micro"] == sum(e.cost_micro for e in events if isinstance(e, RequestSettled))


def test_the_gateway_processes_of_serve_workers_share_a_batch(tmp_path_factory: pytest.TempPathFactory) -> None:
    with running_stack(tmp_path_factory.mktemp("workers"), aliases="chat-openai", serve_args=("--workers", "2"),
                       sim_defaults={"ttft_ms": 150}) as st:  # long enough for the other process's poll
        with openai.OpenAI(base_url=st.gateway_url + "/v1", api_key=st.key, max_retries=0) as client:
            uploaded = client.files.create(file=("w.jsonl", io.BytesIO(tagging_batch(60))), purpose="batch")
            batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                          completion_window="24h")
            done = _wait(client, batch.id, ("completed", "failed", "expired", "cancelled"), timeout=60)
            assert done.status == "completed" and done.request_counts.completed == 60
            lines = client.files.content(done.output_file_id).text.splitlines()
            assert sorted(json.loads(x)["custom_id"] for x in lines) == sorted(f"line-{i}" for i in range(60))
        with sqlite3.connect(st.folder / "batches.sqlite") as db:
            runners = {r for (r,) in db.execute("SELECT runner FROM fb_batch_lines WHERE batch_id = ?", (batch.id,))}
        assert len(runners) == 2  # both gateway processes ran lines


def test_batch_lines_leave_interactive_requests_their_reserve_of_a_tight_limit(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    def tight(tree: dict) -> None:
        for dep in tree["deployments"]:
            if dep["id"] == "sim-openai-mumbai":
                dep["limits"] = {"rpm": 60, "input_tpm": 10_000_000, "output_tpm": 2_000_000}
        tree["rate_limits"]["deployment_mirror_pct"] = 100
        tree["batches"] = {"reserve_pct": 25}  # 15 requests of the minute's 60 stay for interactive ones

    with running_stack(tmp_path_factory.mktemp("tight"), aliases="chat-openai", mutate=tight) as st:
        with openai.OpenAI(base_url=st.gateway_url + "/v1", api_key=st.key, max_retries=0) as client:
            uploaded = client.files.create(file=("tight.jsonl", io.BytesIO(tagging_batch(100))), purpose="batch")
            batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                          completion_window="24h")
            deadline = time.monotonic() + 20
            while client.batches.retrieve(batch.id).request_counts.completed < 45 and time.monotonic() < deadline:
                time.sleep(0.1)
            for _ in range(12):  # the batch has taken all it may: interactive requests still find room
                client.chat.completions.create(model="chat-openai", max_tokens=8,
                                               messages=[{"role": "user", "content": "interactive"}])
                time.sleep(0.2)
            progress = client.batches.retrieve(batch.id)
            assert progress.status == "in_progress" and 45 <= progress.request_counts.completed < 100
            assert progress.request_counts.failed == 0  # paused lines wait in the queue, they do not fail
        with urllib.request.urlopen(st.gateway_url + "/metrics") as resp:
            metrics = resp.read().decode()
        assert 'farebox_refusals_total{code="batch_paused"}' in metrics
        assert 'farebox_batch_lines_total{outcome="later"}' in metrics


def test_anthropic_message_batches_run_through_the_same_path(stack: Stack) -> None:
    requests = [{"custom_id": f"q-{i}", "params": {"model": "chat-anthropic", "max_tokens": 16,
                                                   "messages": [{"role": "user", "content": f"Summarise note {i}."}]}}
                for i in range(20)]
    with anthropic.Anthropic(base_url=stack.gateway_url, api_key=stack.key, max_retries=0) as claude:
        batch = claude.messages.batches.create(requests=requests)
        assert batch.id.startswith("msgbatch_") and batch.processing_status == "in_progress"
        deadline = time.monotonic() + 60
        while batch.processing_status != "ended" and time.monotonic() < deadline:
            time.sleep(0.2)
            batch = claude.messages.batches.retrieve(batch.id)
        assert batch.processing_status == "ended" and batch.request_counts.succeeded == 20
        results = {r.custom_id: r.result for r in claude.messages.batches.results(batch.id)}
        assert sorted(results) == sorted(f"q-{i}" for i in range(20))
        assert all(r.type == "succeeded" and r.message.content[0].text for r in results.values())
        assert batch.id in [b.id for b in claude.messages.batches.list(limit=50).data]
        with pytest.raises(anthropic.BadRequestError):  # a custom_id Anthropic would refuse
            claude.messages.batches.create(requests=[{"custom_id": "has space", "params": requests[0]["params"]}])
        with pytest.raises(anthropic.NotFoundError):  # another surface's batch id is not a message batch
            claude.messages.batches.retrieve("batch_" + "0" * 24)
        claude.messages.batches.delete(batch.id)
        with pytest.raises(anthropic.NotFoundError):
            claude.messages.batches.retrieve(batch.id)
    mine = _by_batch(read_events(stack.events_path), batch.id)
    assert len(mine[RequestSettled]) == 20 and {e.api for e in mine[RequestAdmitted]} == {"messages"}


def test_an_embeddings_batch_runs_each_line_through_the_embeddings_path(client: openai.OpenAI, stack: Stack) -> None:
    lines = b"".join(json.dumps({"custom_id": f"e{i}", "method": "POST", "url": "/v1/embeddings",
                                 "body": {"model": "embed-default", "input": f"ticket text {i}"}}).encode() + b"\n"
                     for i in range(10))
    uploaded = client.files.create(file=("e.jsonl", io.BytesIO(lines)), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h")
    done = _wait(client, batch.id, ("completed", "failed", "expired", "cancelled"))
    assert done.status == "completed" and done.request_counts.completed == 10
    answers = [json.loads(x) for x in client.files.content(done.output_file_id).text.splitlines()]
    assert all(a["response"]["body"]["data"][0]["object"] == "embedding" for a in answers)
    assert {e.api for e in _by_batch(read_events(stack.events_path), batch.id)[RequestAdmitted]} == {"embeddings"}
    chat = client.files.create(file=("c.jsonl", io.BytesIO(tagging_batch(1))), purpose="batch")
    failed = client.batches.create(input_file_id=chat.id, endpoint="/v1/embeddings", completion_window="24h")
    assert failed.status == "failed" and failed.errors.data[0].code == "invalid_url"  # lines name another endpoint
