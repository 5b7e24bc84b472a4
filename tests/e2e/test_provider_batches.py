"""Batches sent whole to the providers' batch APIs (``batch_via: provider``), end to end through the official
``openai`` SDK against the simulator's OpenAI Batch API and Anthropic Message Batches: admitted whole against the
budgets, every line metered once at the deployment's ``batch`` price (worked out here by hand from the price
book), reading the batch again bills nothing, a cancel settles what ran and releases the rest of the hold, a
gateway killed while the provider runs the batch picks it up again, and a batch whose worst case does not fit its
budget is refused before anything is sent."""

from __future__ import annotations

import io
import json
import time
import urllib.request
from decimal import Decimal
from typing import Iterator

import openai
import pytest

from ledger.events import HoldExpired, RequestAdmitted, RequestAttempted, RequestSettled
from tests.batch_lines import tagging_batch
from tests.harness import Stack, admin_token, mint, read_events, running_stack, wait_key_live

pytestmark = pytest.mark.e2e
INR_PER_USD = 88
# the batch tier per 1M tokens (input, cached input, output) of each deployment, from examples/farebox.yaml
BATCH_PRICE = {"sim-openai-mumbai": (Decimal("1.00"), Decimal("0.10"), Decimal("5.00")),
               "sim-anthropic-mumbai": (Decimal("1.50"), Decimal("0.15"), Decimal("7.50"))}
STANDARD_PRICE = {"sim-openai-mumbai": (Decimal("2.00"), Decimal("0.20"), Decimal("10.00")),
                  "sim-anthropic-mumbai": (Decimal("3.00"), Decimal("0.30"), Decimal("15.00"))}
ENDED = ("completed", "failed", "expired", "cancelled")


def _mutate(tree: dict) -> None:
    tree["aliases"] += [
        {"name": "chat-openai-pb", "kind": "chat", "deployments": ["sim-openai-mumbai"], "batch_via": "provider"},
        {"name": "chat-anthropic-pb", "kind": "chat", "deployments": ["sim-anthropic-mumbai"],
         "batch_via": "provider"}]
    tree["batches"] = {"provider_poll_s": 0.2}
    tree["teams"].append({"name": "thrifty", "business_unit": "retail", "cost_centre": "CC-1002"})
    tree["apps"].append({"name": "tagger", "team": "thrifty"})
    tree["budgets"]["scopes"].append({"scope": "team:thrifty", "monthly_limit": "1.00"})


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("provider-batches"), aliases="chat-openai-pb,chat-anthropic-pb",
                       mutate=_mutate) as st:
        yield st


@pytest.fixture()
def client(stack: Stack) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key, max_retries=0) as c:
        yield c


def _sim(stack: Stack, path: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(stack.sim_url + path, data=data, method="POST" if body is not None else "GET",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request) as resp:
        return json.loads(resp.read())


def _run(client: openai.OpenAI, n: int, model: str, name: str) -> openai.types.Batch:
    uploaded = client.files.create(file=(f"{name}.jsonl", io.BytesIO(tagging_batch(n, model=model))), purpose="batch")
    return client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")


def _wait(client: openai.OpenAI, batch_id: str, timeout: float = 60.0) -> openai.types.Batch:
    deadline = time.monotonic() + timeout
    while True:
        batch = client.batches.retrieve(batch_id)
        if batch.status in ENDED or time.monotonic() > deadline:
            return batch
        time.sleep(0.2)


def _mine(stack: Stack, batch_id: str) -> dict[type, list]:
    out: dict[type, list] = {RequestAdmitted: [], RequestAttempted: [], RequestSettled: [], HoldExpired: []}
    for e in read_events(stack.events_path):
        if type(e) in out and e.request_id == batch_id:
            out[type(e)].append(e)
    return out


def _by_hand(deployment: str, usage, book: dict = BATCH_PRICE) -> int:
    price = book[deployment]
    usd = (usage.input * price[0] + usage.cached_input * price[1] + (usage.output + usage.reasoning) * price[2]) \
        / 1_000_000
    return int((usd * INR_PER_USD * 1_000_000).to_integral_value(rounding="ROUND_CEILING"))


_TOKENS: dict[str, str] = {}


def _admin(stack: Stack, path: str) -> dict:
    token = _TOKENS.get(str(stack.config))
    if token is None:
        token = _TOKENS[str(stack.config)] = admin_token(stack.config, "fin-pb", "finance", live_at=stack.gateway_url)
    request = urllib.request.Request(stack.gateway_url + path, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request) as resp:
        return json.loads(resp.read())


def _held(stack: Stack) -> dict:
    return _admin(stack, "/admin/v1/budgets/team:platform")


@pytest.mark.parametrize("model,deployment", [("chat-openai-pb", "sim-openai-mumbai"),
                                              ("chat-anthropic-pb", "sim-anthropic-mumbai")])
def test_a_provider_batch_is_admitted_whole_and_bills_each_line_once_at_the_batch_price(
        client: openai.OpenAI, stack: Stack, model: str, deployment: str) -> None:
    batch = _run(client, 200, model, "pb")
    assert batch.status == "in_progress"
    admitted = _mine(stack, batch.id)[RequestAdmitted]  # admitted whole at creation, before anything ran
    assert len(admitted) == 1 and admitted[0].tags["fb.batch"] == batch.id
    assert admitted[0].hold_ttl_s >= 86_400 and set(admitted[0].holds) == {f"key:{admitted[0].key_id}", "team:platform", "bu:retail"}
    done = _wait(client, batch.id)
    assert done.status == "completed", done
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (200, 200, 0)
    lines = [json.loads(x) for x in client.files.content(done.output_file_id).text.splitlines()]
    assert sorted(x["custom_id"] for x in lines) == sorted(f"line-{i}" for i in range(200))
    assert all(x["response"]["status_code"] == 200 and x["response"]["body"]["choices"][0]["message"]["content"]
               and x["response"]["body"]["model"] == model for x in lines)

    events = _mine(stack, batch.id)
    attempts = events[RequestAttempted]
    assert sorted(a.attempt for a in attempts) == list(range(1, 201))  # each line metered once
    for a in attempts:
        assert a.deployment == deployment and a.usage.service_tier == "batch" and a.usage.source == "provider"
        assert a.cost_micro == _by_hand(deployment, a.usage) > 0
    (settled,) = events[RequestSettled]
    assert settled.cost_micro == sum(a.cost_micro for a in attempts)
    assert settled.hold_released == admitted[0].holds and settled.overrun_micro == 0
    by_line = {x["custom_id"]: x["response"]["body"]["x_farebox"]["cost_micro"] for x in lines}
    assert sum(by_line.values()) == settled.cost_micro
    seen = _admin(stack, f"/admin/v1/batches/{batch.id}")["x_farebox"]  # what the batch price saved, by hand
    assert seen["via"] == "provider" and seen["cost_micro"] == settled.cost_micro
    assert seen["saved_micro"] == sum(_by_hand(deployment, a.usage, STANDARD_PRICE) - a.cost_micro
                                      for a in attempts) > 0

    for _ in range(2):  # reading it again bills nothing
        assert client.batches.retrieve(batch.id).status == "completed"
        client.files.content(done.output_file_id).read()
    time.sleep(0.6)
    again = _mine(stack, batch.id)
    assert len(again[RequestAttempted]) == 200 and len(again[RequestSettled]) == 1
    export = _sim(stack, "/v1/usage/export")["data"]  # the provider bills the lines as its batch group
    assert sum(r["requests"] for r in export if r.get("service_tier") == "batch"
               and r["model"] == attempts[0].model) >= 200


def test_a_cancelled_provider_batch_settles_what_ran_and_releases_the_rest(client: openai.OpenAI, stack: Stack) -> None:
    _sim(stack, "/_sim/models/sim-gpt-mid-2026-08", {"batch_line_ms": 40})  # 200 lines: 8 s at the provider
    try:
        batch = _run(client, 200, "chat-openai-pb", "cancel")
        time.sleep(1.5)
        assert client.batches.cancel(batch.id).status in ("cancelling", "cancelled")
        ended = _wait(client, batch.id)
    finally:
        _sim(stack, "/_sim/models/sim-gpt-mid-2026-08", {"batch_line_ms": 5})
    assert ended.status == "cancelled"
    ran = ended.request_counts.completed
    assert 5 <= ran < 200
    assert len(client.files.content(ended.output_file_id).text.splitlines()) == ran
    events = _mine(stack, batch.id)
    assert len(events[RequestAttempted]) == ran
    (settled,) = events[RequestSettled]
    (admitted,) = events[RequestAdmitted]
    assert settled.cost_micro == sum(a.cost_micro for a in events[RequestAttempted]) < admitted.holds["team:platform"]
    assert _held(stack)["held_micro"] == 0  # the rest of the hold went back


def test_a_gateway_killed_while_the_provider_runs_picks_the_batch_up(client: openai.OpenAI, stack: Stack) -> None:
    _sim(stack, "/_sim/models/sim-gpt-mid-2026-08", {"batch_line_ms": 20})  # 150 lines: 3 s at the provider
    try:
        batch = _run(client, 150, "chat-openai-pb", "kill")
        time.sleep(0.8)  # sent; still running at the provider
        stack.restart_gateway(kill=True)
        with openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key, max_retries=0) as again:
            done = _wait(again, batch.id, timeout=60)
    finally:
        _sim(stack, "/_sim/models/sim-gpt-mid-2026-08", {"batch_line_ms": 5})
    assert done.status == "completed" and done.request_counts.completed == 150
    events = _mine(stack, batch.id)
    assert len(events[RequestAdmitted]) == 1 and len(events[RequestSettled]) == 1 and not events[HoldExpired]
    assert sorted({a.attempt for a in events[RequestAttempted]}) == list(range(1, 151))
    sent = [e for e in _sim(stack, "/_sim/requests?n=256")["data"] if e["path"] == "/v1/batches"
            and (e["body"] or {}).get("metadata", {}).get("farebox_batch") == batch.id]
    assert len(sent) == 1  # sent once: the restarted gateway polled the batch it had sent, it did not send it again
    assert _held(stack)["held_micro"] == 0


def test_a_provider_batch_beyond_its_budget_is_refused_before_anything_is_sent(stack: Stack) -> None:
    thrifty = mint(stack.config, "thrifty", "tagger", "chat-openai-pb")
    wait_key_live(stack.gateway_url, thrifty)
    seen = max([e["seq"] for e in _sim(stack, "/_sim/requests?n=1")["data"]], default=0)
    with openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=thrifty, max_retries=0) as client:
        # 50 lines of up to 4,000 output tokens: about 50 x 4000 x $5/1M x 88 = INR 88 at worst, over INR 1.00
        uploaded = client.files.create(file=("big.jsonl", io.BytesIO(tagging_batch(50, "chat-openai-pb", 4000))),
                                       purpose="batch")
        with pytest.raises(openai.RateLimitError) as refused:
            client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                  completion_window="24h")
        assert refused.value.body["code"] == "budget_exhausted"
        assert client.batches.list().data == []  # nothing kept
        small = client.files.create(file=("small.jsonl", io.BytesIO(tagging_batch(5, "chat-openai-pb", 16))),
                                    purpose="batch")
        fits = client.batches.create(input_file_id=small.id, endpoint="/v1/chat/completions", completion_window="24h")
        assert _wait(client, fits.id).status == "completed"
    sent = [e for e in _sim(stack, "/_sim/requests?n=20")["data"] if e["seq"] > seen and e["path"] == "/v1/batches"]
    assert len(sent) == 1  # only the batch that fits reached the provider


def test_reconciliation_matches_the_providers_batch_group(stack: Stack) -> None:
    """The simulator's export bills provider batch lines as a ``batch`` group of their own; farebox's attempts of
    those lines carry the batch tier, so the day reconciles with nothing flagged, batch rows matched."""
    import subprocess
    import sys
    from datetime import datetime, timezone

    from tests.harness import ROOT

    out = subprocess.run([sys.executable, "-m", "farebox", "reconcile", "--config", str(stack.config), "--date",
                          datetime.now(timezone.utc).date().isoformat(), "--format", "json", "--account",
                          "acct-retail"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    batch = [r for r in report["rows"] if r.get("tier") == "batch" and r["measure"] == "tokens"]
    assert batch and report["flagged"] == 0
    output = [r for r in batch if r["token_type"] == "output"]
    assert output and all(r["provider_figure"] == r["ours"] != "0" for r in output)


def test_an_anthropic_message_batch_goes_to_anthropic_as_it_is(stack: Stack) -> None:
    """The Anthropic surface's Message Batch on a ``batch_via: provider`` alias of an Anthropic deployment: sent
    as it is to the provider's Message Batches, its results the provider's own Messages (the alias as model, the
    line's request id), admitted whole and billed once per line at the batch price."""
    import anthropic

    seen = max([e["seq"] for e in _sim(stack, "/_sim/requests?n=1")["data"]], default=0)
    requests = [{"custom_id": f"q-{i}", "params": {"model": "chat-anthropic-pb", "max_tokens": 32,
                                                   "system": "Be brief.",
                                                   "messages": [{"role": "user", "content": f"Summarise note {i}."}]}}
                for i in range(30)]
    with anthropic.Anthropic(base_url=stack.gateway_url, api_key=stack.key, max_retries=0) as claude:
        batch = claude.messages.batches.create(requests=requests)
        deadline = time.monotonic() + 60
        while batch.processing_status != "ended" and time.monotonic() < deadline:
            time.sleep(0.2)
            batch = claude.messages.batches.retrieve(batch.id)
        assert batch.processing_status == "ended" and batch.request_counts.succeeded == 30
        results = {r.custom_id: r.result for r in claude.messages.batches.results(batch.id)}
    assert sorted(results) == sorted(f"q-{i}" for i in range(30))
    assert all(r.type == "succeeded" and r.message.model == "chat-anthropic-pb" and r.message.content[0].text
               for r in results.values())
    sent = [e for e in _sim(stack, "/_sim/requests?n=50")["data"] if e["seq"] > seen]
    assert [e["path"] for e in sent] == ["/v1/messages/batches"] and sent[0]["body"] == {"requests": 30}
    events = _mine(stack, batch.id)
    assert len(events[RequestAdmitted]) == 1 and len(events[RequestSettled]) == 1
    attempts = events[RequestAttempted]
    assert sorted(a.attempt for a in attempts) == list(range(1, 31))
    assert all(a.cost_micro == _by_hand("sim-anthropic-mumbai", a.usage) > 0 for a in attempts)
