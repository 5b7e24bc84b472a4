"""A batch the gateway runs is admitted whole, through the official ``openai`` SDK: every line's hold is taken when
the batch is created (the team's budget shows it held at once, and interactive spend cannot take it), a batch
whose worst case does not fit is refused 429 with nothing kept or sent, and each line then settles its own hold
once. (Cancelling releases the unrun lines' holds: ``test_batches.py``.)"""

from __future__ import annotations

import io
import json
import time
import urllib.request
from typing import Iterator

import openai
import pytest

from ledger.events import RequestAdmitted, RequestSettled
from tests.batch_lines import tagging_batch
from tests.harness import Stack, admin_token, mint, read_events, running_stack, wait_key_live

pytestmark = pytest.mark.e2e
LIMIT_MICRO = 10_000_000  # team:thrifty's month: INR 10.00
ENDED = ("completed", "failed", "expired", "cancelled")
_TOKENS: dict[str, str] = {}  # the finance token per stack


def _mutate(tree: dict) -> None:
    tree["teams"].append({"name": "thrifty", "business_unit": "retail", "cost_centre": "CC-1002"})
    tree["apps"].append({"name": "tagger", "team": "thrifty"})
    tree["budgets"]["scopes"].append({"scope": "team:thrifty", "monthly_limit": "10.00"})


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # lines take 5 s each and two run at a time: a three-line batch is still running when the test looks, even on
    # a loaded machine (CI once saw two of the lines settled before the budget was read at 1.5 s a line)
    with running_stack(tmp_path_factory.mktemp("batch-admission"), aliases="chat-openai", mutate=_mutate,
                       sim_defaults={"ttft_ms": 5000}) as st:
        _TOKENS[str(st.config)] = admin_token(st.config, "fin-admission", "finance", live_at=st.gateway_url)
        yield st


@pytest.fixture(scope="module")
def thrifty(stack: Stack) -> Iterator[openai.OpenAI]:
    key = mint(stack.config, "thrifty", "tagger", "chat-openai")
    wait_key_live(stack.gateway_url, key)
    with openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=key, max_retries=0) as client:
        yield client


def _budget(stack: Stack) -> dict:
    token = _TOKENS[str(stack.config)]  # minted with the stack: reading the budget must not wait on a subprocess
    request = urllib.request.Request(stack.gateway_url + "/admin/v1/budgets/team:thrifty",
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request) as resp:
        return json.loads(resp.read())


def _create(client: openai.OpenAI, n: int, max_tokens: int) -> openai.types.Batch:
    uploaded = client.files.create(file=("t.jsonl", io.BytesIO(tagging_batch(n, "chat-openai", max_tokens))),
                                   purpose="batch")
    return client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")


def _wait(client: openai.OpenAI, batch_id: str, timeout: float = 60.0) -> openai.types.Batch:
    deadline = time.monotonic() + timeout
    while (batch := client.batches.retrieve(batch_id)).status not in ENDED and time.monotonic() < deadline:
        time.sleep(0.2)
    return batch


def test_a_batch_is_held_whole_at_creation_and_interactive_spend_cannot_take_its_lines_money(
        stack: Stack, thrifty: openai.OpenAI) -> None:
    # three lines of up to 2,500 output tokens: about INR 2.2 each at chat-openai's standard price
    batch = _create(thrifty, 3, 2500)
    held = [e for e in read_events(stack.events_path)
            if isinstance(e, RequestAdmitted) and e.tags.get("fb.batch") == batch.id]
    assert sorted(e.request_id for e in held) == [f"{batch.id}-{n}" for n in (1, 2, 3)]  # one hold per line, now
    assert all(e.tags.get("fb.reserved") == "1" and e.hold_ttl_s > 86_400 for e in held)
    whole = sum(e.holds["team:thrifty"] for e in held)
    budget = _budget(stack)
    assert budget["held_micro"] == whole  # all three, though at most two run at once
    # an interactive request whose worst case fits beside the lines running, but not beside the whole batch
    left = LIMIT_MICRO - budget["settled_micro"] - whole
    max_tokens = left // 880 + 300  # INR 0.00088 an output token (USD 10 per 1M at INR 88)
    assert max_tokens * 880 < left + whole // 3
    with pytest.raises(openai.RateLimitError) as refused:
        thrifty.chat.completions.create(model="chat-openai", max_tokens=max_tokens,
                                        messages=[{"role": "user", "content": "Summarise the quarter."}],
                                        extra_headers={"x-fb-max-wait-ms": "0"})
    assert refused.value.body["code"] in ("budget_exhausted", "budget_reserved")
    done = _wait(thrifty, batch.id)
    assert done.status == "completed" and done.request_counts.completed == 3  # no line refused for money
    events = read_events(stack.events_path)
    settled = [e for e in events if isinstance(e, RequestSettled) and e.request_id.startswith(batch.id)]
    assert sorted(e.request_id for e in settled) == sorted(e.request_id for e in held)  # each hold settled once
    assert all(e.attempts == 1 and e.cost_micro > 0 and e.hold_released["team:thrifty"] == h.holds["team:thrifty"]
               for e, h in zip(sorted(settled, key=lambda e: e.request_id), sorted(held, key=lambda e: e.request_id)))
    assert _budget(stack)["held_micro"] == 0


def test_a_batch_whose_worst_case_does_not_fit_is_refused_whole_and_nothing_is_kept_or_sent(
        stack: Stack, thrifty: openai.OpenAI) -> None:
    before = len(read_events(stack.events_path))
    batches_before = {b.id for b in thrifty.batches.list().data}
    with pytest.raises(openai.RateLimitError) as refused:
        _create(thrifty, 5, 4000)  # about INR 3.5 a line at worst: INR 17.6 against INR 10.00
    assert refused.value.body["code"] == "budget_exhausted"
    assert refused.value.response.headers.get("x-should-retry") == "false"
    assert {b.id for b in thrifty.batches.list().data} == batches_before  # nothing kept
    assert not [e for e in read_events(stack.events_path)[before:] if isinstance(e, RequestAdmitted)]
    assert _budget(stack)["held_micro"] == 0
