"""``farebox serve --workers 2`` end to end: one owner process, two gateway processes on one port.

Real processes (simulator, owner, gateway processes) and the official openai SDK as the client:

* the SDK works unchanged, and the kernel spreads connections over both gateway processes;
* budgets stay exact under a concurrent burst (the processes spend leases the owner grants): the team's
  settled money never passes its limit except by the recorded overrun, and every admission is closed once;
* ``kill -9`` of one gateway process mid-burst: the owner starts it again under the same pod id, the dead
  process's holds expire charged in full, its leases expire, and replay of the archive equals the live log.

A request id's 12 hex digits after ``req_`` are its process's random prefix: they tell which process
answered (the pod id does not, once a process has been restarted under the same one).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Callable, Iterator, TypeVar
from zoneinfo import ZoneInfo

import openai
import pytest

from ledger.balances import Ledger, ScopeBalance
from ledger.events import (
    Event,
    HoldExpired,
    LeaseExpired,
    LeaseGranted,
    LeaseReturned,
    RequestAdmitted,
    RequestSettled,
)
from ledger.periods import period_of
from tests.harness import ROOT, Stack, generous_limits, mint, read_events, running_stack, stop

pytestmark = pytest.mark.e2e

WORKERS = ("--workers", "2")
ALIAS = "chat-openai"  # one deployment: the hold is priced at its prices ($2 in / $10 out per 1M, x 88 INR)
TEAM_SCOPE = "team:platform"
TZ = ZoneInfo("Asia/Kolkata")  # examples/farebox.yaml's budget time zone
PROCESS_LINE = re.compile(r"farebox gateway process (\d+) of (\d+): pid (\d+) \(pod (\S+)\)")
T = TypeVar("T")


# --- reading the stack ------------------------------------------------------------------------


def tail(stack: Stack, chars: int = 3000) -> str:
    return "gateway.log tail:\n" + (stack.folder / "gateway.log").read_text(errors="replace")[-chars:]


def wait_until(check: Callable[[], T], timeout: float, what: str, stack: Stack, interval: float = 0.1) -> T:
    """``check()`` once truthy; else fail with its last value and the gateway log's tail."""
    deadline = time.monotonic() + timeout
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s (last: {last!r})\n{tail(stack)}")
        time.sleep(interval)


@contextmanager
def explained(stack: Stack) -> Iterator[None]:
    """An SDK error inside fails the test with the gateway log's tail next to it."""
    try:
        yield
    except openai.APIError as exc:
        raise AssertionError(f"{exc!r}\n{tail(stack)}") from exc


def process_lines(stack: Stack) -> list[tuple[int, int, str]]:
    """(index, pid, pod) of every gateway process the owner started, in order (restarts included)."""
    text = (stack.folder / "gateway.log").read_text(errors="replace")
    return [(int(m[1]), int(m[3]), m[4]) for m in PROCESS_LINE.finditer(text)]


def pod_prefix(stack: Stack) -> str:
    """The owner's pod id (``tests.harness.test_config``); gateway process K is ``{it}-K``."""
    return f"test-pod-{stack.gateway_url.rsplit(':', 1)[1]}"


def worker_pids(stack: Stack) -> dict[int, int]:
    return {int(k): v for k, v in json.loads((stack.folder / "workers.json").read_text()).items()}


def process_of(request_id: str) -> str:
    """The random per-process part of a request id (``proxy.api.app.new_request_id``)."""
    return request_id[4:16]


def by_type(events: list[Event], cls: type[T]) -> list[T]:
    return [e for e in events if isinstance(e, cls)]


def closes(events: list[Event]) -> Counter[str]:
    """How many times each request was closed (settled or expired)."""
    return Counter(e.request_id for e in events if isinstance(e, (RequestSettled, HoldExpired)))


def all_closed(stack: Stack) -> list[Event] | None:
    """The log once every admitted request in it is closed, else None."""
    events = read_events(stack.events_path)
    admitted = {e.request_id for e in by_type(events, RequestAdmitted)}
    return events if admitted <= set(closes(events)) else None


def budget_period(events: list[Event]) -> str:
    """The budget month of the log's first admission (every test here runs inside one)."""
    return period_of(by_type(events, RequestAdmitted)[0].time, TZ)


def team_balance(events: list[Event]) -> ScopeBalance:
    """The team scope's balance, folded from the log as the embedded ledger folds it."""
    ledger = Ledger(TZ)
    for event in events:
        ledger.apply(event)
    return ledger.balance(TEAM_SCOPE, budget_period(events))


def assert_closed_exactly_once(events: list[Event]) -> None:
    """Every request admitted once and closed once (settled or expired); nothing closed that was not admitted."""
    admitted, closed = Counter(e.request_id for e in by_type(events, RequestAdmitted)), closes(events)
    wrong = {rid: (admitted[rid], closed[rid]) for rid in admitted.keys() | closed.keys()
             if (admitted[rid], closed[rid]) != (1, 1)}
    assert not wrong, f"(admitted, closed) counts per request that are not (1, 1): {wrong}"


# --- the client side -------------------------------------------------------------------------


@dataclass
class Outcome:
    """One request as the client saw it: ``ok`` (a whole 200 answer), ``refused`` (429), ``dropped``
    (the connection broke) or ``error`` (anything else)."""

    kind: str
    request_id: str | None = None
    detail: Any = None


MSG = [{"role": "user", "content": "Summarise the quarterly spend in one line."}]


async def chat(client: openai.AsyncOpenAI, *, stream: bool, output_tokens: int, max_tokens: int) -> Outcome:
    """A chat completion through the SDK, read to the end; a stream must end with its usage chunk."""
    extra = {"x-sim-output-tokens": str(output_tokens)}
    kw: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
    try:
        raw = await client.chat.completions.with_raw_response.create(
            model=ALIAS, messages=MSG, max_completion_tokens=max_tokens, extra_headers=extra, **kw)
        rid = raw.headers["x-fb-request-id"]
        if stream:
            chunks = [chunk async for chunk in raw.parse()]
            last = chunks[-1] if chunks else None
            if last is None or last.usage is None or "x_farebox" not in (last.model_extra or {}):
                return Outcome("error", rid, f"stream without its usage chunk: {last}")
            return Outcome("ok", rid)
        body = raw.parse()
        if "x_farebox" not in (body.model_extra or {}) or not body.choices:
            return Outcome("error", rid, f"an answer without choices or x_farebox: {body}")
        return Outcome("ok", rid)
    except openai.APIStatusError as exc:
        kind = "refused" if exc.status_code == 429 else "error"
        return Outcome(kind, exc.response.headers.get("x-fb-request-id"), (exc.status_code, exc.response.text))
    except openai.APIConnectionError as exc:
        return Outcome("dropped", None, repr(exc.__cause__ or exc))


def live_everywhere(stack: Stack, key: str) -> bool:
    """True once ``key`` is accepted by both gateway processes (fresh connections, told apart by request id)."""
    seen: set[str] = set()
    for _ in range(40):
        request = urllib.request.Request(stack.gateway_url + "/v1/models", headers={"Authorization": f"Bearer {key}"})
        try:
            with urllib.request.urlopen(request, timeout=5) as resp:
                seen.add(process_of(resp.headers["x-fb-request-id"]))
        except urllib.error.HTTPError as exc:
            if exc.code != 401:
                raise
            return False
        if len(seen) == 2:
            return True
    return False


def one_connection_per_request(stack: Stack, key: str) -> openai.AsyncOpenAI:
    """An async client whose every request opens a new connection, so the kernel picks a process each time."""
    return openai.AsyncOpenAI(base_url=stack.gateway_url + "/v1", api_key=key, max_retries=0, timeout=60,
                              default_headers={"Connection": "close"})


# --- a. the SDK through two processes ---------------------------------------------------------


def test_sdk_works_unchanged_and_both_processes_serve(tmp_path) -> None:
    with running_stack(tmp_path / "stack", mutate=generous_limits, serve_args=WORKERS) as stack:
        started = process_lines(stack)
        assert [(i, pod) for i, _, pod in started] == [(1, f"{pod_prefix(stack)}-1"), (2, f"{pod_prefix(stack)}-2")], \
            tail(stack)
        assert worker_pids(stack) == {i: pid for i, pid, _ in started}

        with explained(stack), openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key,
                                             max_retries=0) as client:
            resp = client.chat.completions.create(model=ALIAS, messages=MSG, max_completion_tokens=20)
            assert resp.object == "chat.completion" and resp.choices[0].message.content
            assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens
            assert resp.model_extra["x_farebox"]["cost_micro"] > 0

            chunks = list(client.chat.completions.create(model=ALIAS, messages=MSG, max_completion_tokens=16,
                                                         stream=True, stream_options={"include_usage": True}))
            assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).strip()
            last = chunks[-1]
            assert last.choices == [] and last.usage.completion_tokens == 16
            extra = last.model_extra["x_farebox"]
            assert extra["cost_micro"] > 0 and extra["currency"] == "INR" and extra["request_id"].startswith("req_")
            assert all(c.usage is None for c in chunks[:-1])

            models = {m.id for m in client.models.list()}
            assert {"chat-default", "chat-openai", "chat-anthropic", "embed-default"} <= models

        async def burst() -> list[Outcome]:
            async with openai.AsyncOpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key,
                                          max_retries=0, timeout=60) as client:
                return await asyncio.gather(*(chat(client, stream=i % 2 == 0, output_tokens=8, max_tokens=16)
                                              for i in range(40)))

        outcomes = asyncio.run(burst())
        assert [o for o in outcomes if o.kind != "ok"] == [], tail(stack)
        rids = {o.request_id for o in outcomes}
        events = wait_until(lambda: (ev := read_events(stack.events_path)) and
                            rids <= {e.request_id for e in by_type(ev, RequestSettled)} and ev,
                            10, "every answered request settled in the log", stack)
        admitted = {e.request_id: e for e in by_type(events, RequestAdmitted) if e.request_id in rids}
        pods = Counter(e.pod for e in admitted.values())
        assert set(pods) == {f"{pod_prefix(stack)}-1", f"{pod_prefix(stack)}-2"}, \
            f"40 concurrent connections all served by one process: {pods}\n{tail(stack)}"
        # each process's request ids carry its own prefix, and each prefix one pod
        pod_of_prefix = {(process_of(rid), e.pod) for rid, e in admitted.items()}
        assert len(pod_of_prefix) == 2 and len({p for p, _ in pod_of_prefix}) == 2, pod_of_prefix

        async def stored() -> set[str]:  # a stored response, read and continued over other connections
            async def one(i: int) -> str:
                async with openai.AsyncOpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key,
                                              max_retries=0, timeout=60) as first:
                    kept = await first.responses.create(model=ALIAS, input=f"Note {i}.", max_output_tokens=16)
                async with openai.AsyncOpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key,
                                              max_retries=0, timeout=60) as later:
                    assert (await later.responses.retrieve(kept.id)).output_text == kept.output_text
                    follow = await later.responses.create(model=ALIAS, input="More.", max_output_tokens=16,
                                                          previous_response_id=kept.id)
                    assert follow.usage.input_tokens > kept.usage.input_tokens
                return process_of(kept.id.removeprefix("resp_")) + process_of(follow.id.removeprefix("resp_"))
            return set(await asyncio.gather(*(one(i) for i in range(12))))

        served = asyncio.run(stored())
        assert any(pair[:12] != pair[12:] for pair in served), served  # kept by one process, continued by the other
        assert stop(stack.gateway) == 0, tail(stack)
        assert not (stack.folder / "workers.json").exists()


# --- b. exact budgets under a concurrent burst ------------------------------------------------

BURST = 150
MAX_TOKENS = 200
# The hold's output part alone: 200 tokens x $10/1M x 88 INR/USD = 176 000 micro-INR per request (the prompt
# adds a few thousand more): the limit pays for 60% of the burst at its worst case.
LIMIT_MICRO = BURST * MAX_TOKENS * 10 * 88 * 6 // 10


def burst_budget(tree: dict) -> None:
    generous_limits(tree)  # rate limits far above the burst: only the budget refuses
    # the burst settles in milliseconds: a short wait for in-flight money is enough (the default 20 s would make
    # the tail of the burst wait that long for money that is not coming back)
    tree["server"]["budget_wait_s"] = 3
    tree["budgets"]["scopes"] = [{"scope": TEAM_SCOPE, "monthly_limit": str(Decimal(LIMIT_MICRO) / 1_000_000),
                                  "soft_pct": 80}]


def test_budget_is_exact_under_a_concurrent_burst(tmp_path) -> None:
    with running_stack(tmp_path / "stack", mutate=burst_budget, serve_args=WORKERS) as stack:
        keys = [stack.key] + [mint(stack.config, "platform", "playground", ALIAS) for _ in range(3)]
        for key in keys[1:]:  # minted while serving: live in each process at its next config poll
            wait_until(lambda: live_everywhere(stack, key), 10, "a new key live in both processes", stack)

        async def burst() -> list[Outcome]:
            clients = [openai.AsyncOpenAI(base_url=stack.gateway_url + "/v1", api_key=key, max_retries=0, timeout=60)
                       for key in keys]
            try:
                # real usage between half and all of the cap: some of each hold comes back at settlement
                return await asyncio.gather(*(
                    chat(clients[i % len(clients)], stream=i % 3 == 0, output_tokens=100 + (i * 37) % 101,
                         max_tokens=MAX_TOKENS) for i in range(BURST)))
            finally:
                await asyncio.gather(*(c.close() for c in clients))

        started = time.monotonic()
        outcomes = asyncio.run(burst())
        burst_s = time.monotonic() - started
        assert stop(stack.gateway) == 0, tail(stack)  # SIGTERM: the processes drain and return their leases
        events = read_events(stack.events_path)

    kinds = Counter(o.kind for o in outcomes)
    assert [o for o in outcomes if o.kind not in ("ok", "refused")] == [], tail(stack)
    assert kinds["refused"] > 0 and kinds["ok"] > 0, f"{kinds} in {burst_s:.1f}s: the limit should refuse some"
    for o in (o for o in outcomes if o.kind == "refused"):
        status, text = o.detail
        error = json.loads(text)["error"]  # OpenAI-shaped: {"error": {"message", "type", "code", ...}}
        assert status == 429 and error["code"] in ("budget_exhausted", "budget_reserved"), error
        assert isinstance(error["message"], str) and TEAM_SCOPE in error["message"] and error["type"], error

    admitted = by_type(events, RequestAdmitted)
    worst = min(e.holds[TEAM_SCOPE] for e in admitted)
    assert LIMIT_MICRO < BURST * worst, f"the limit {LIMIT_MICRO} pays for the whole burst (hold {worst})"
    pods = Counter(e.pod for e in admitted)
    assert len(pods) == 2, f"one process spent the whole budget: {pods}"
    assert_closed_exactly_once(events)
    settled = {e.request_id: e for e in by_type(events, RequestSettled)}
    ok = {o.request_id for o in outcomes if o.kind == "ok"}
    assert ok <= set(settled), f"200 answers without a settlement: {ok - set(settled)}"
    assert all(settled[rid].final_status == 200 for rid in ok)
    assert {e.request_id for e in admitted} == ok, "an admitted request the client did not get whole, or back"

    balance = team_balance(events)
    direct = sum(e.cost_by_scope.get(TEAM_SCOPE, 0) for e in settled.values()) + \
        sum(e.charged.get(TEAM_SCOPE, 0) for e in by_type(events, HoldExpired))
    assert balance.settled == direct and balance.held == 0
    assert balance.settled <= LIMIT_MICRO + balance.overrun, \
        f"overshoot: settled {balance.settled} > limit {LIMIT_MICRO} + recorded overrun {balance.overrun}"
    assert balance.settled >= LIMIT_MICRO // 2, \
        f"only {balance.settled} of {LIMIT_MICRO} used ({kinds}): the budget refused what it could pay"
    # at every point of the log: settled + held never passed the limit, but for the overrun recorded so far
    ledger, period = Ledger(TZ), budget_period(events)
    for event in events:
        ledger.apply(event)
        b = ledger.balance(TEAM_SCOPE, period)
        assert b.settled + b.held <= LIMIT_MICRO + b.overrun, (event.id, b)
    granted = {e.lease_id for e in by_type(events, LeaseGranted) if e.scope == TEAM_SCOPE}
    returned = Counter(e.lease_id for e in by_type(events, LeaseReturned))
    expired = {e.lease_id for e in by_type(events, LeaseExpired)}
    assert granted and all(returned[lid] == 1 for lid in granted), \
        f"graceful stop: leases not returned once: {[(lid, returned[lid]) for lid in granted if returned[lid] != 1]}"
    assert not expired & granted, f"leases expired though the processes returned them: {expired & granted}"


# --- c. kill -9 of one gateway process mid-burst ----------------------------------------------

HOLD_TTL_S = 6
LEASE_TTL_S = 8
# 60 tokens at 20/s: ~3 s, open when the process is killed, and done well inside the hold TTL on the survivor
SLOW_STREAM = {"x-sim-tokens-per-s": "20"}
SLOW_TOKENS = 60


def short_ttls(tree: dict) -> None:
    generous_limits(tree)
    tree["server"]["hold_ttl_s"] = HOLD_TTL_S
    tree["server"]["sweep_interval_s"] = 0.2
    # above the wallet's 5 s expiry margin (``WalletPolicy.expiry_margin_s``): a lease closer than that to its
    # expiry funds nothing, so a 4 s lease would be asked for, granted and returned in a loop
    tree["distributed"] = {"lease_ttl_s": LEASE_TTL_S, "lease_expiry_grace_s": 2}
    tree["budgets"]["scopes"] = [{"scope": TEAM_SCOPE, "monthly_limit": "500.00", "soft_pct": 80}]
    tree["archive"] = {"flush_interval_s": 0.2, "flush_events": 10}


def test_kill_9_of_a_gateway_process_mid_burst(tmp_path) -> None:
    with running_stack(tmp_path / "stack", mutate=short_ttls, serve_args=WORKERS) as stack:
        first = {i: pid for i, pid, _ in process_lines(stack)}
        kill = asyncio.run(_kill_mid_burst(stack, first))
        victim_pod, cut = kill.pod, kill.cut
        wait_until(lambda: all_closed(stack), HOLD_TTL_S + 15, "every admitted request closed", stack, interval=0.3)

        # the dead process's leases: each one closed, returned before the kill or expired after it
        def dead_leases_closed() -> list[Event] | None:
            ev = read_events(stack.events_path)
            prefix = dead_lease_prefix(ev, cut)
            dead = {e.lease_id for e in by_type(ev, LeaseGranted) if e.lease_id.startswith(prefix)}
            shut = {e.lease_id for e in ev if isinstance(e, (LeaseExpired, LeaseReturned))}
            return ev if dead and dead <= shut else None

        wait_until(dead_leases_closed, 15, "the killed process's leases expired", stack, interval=0.3)
        events, replay = stopped_and_replayed(stack)

    assert_each_event_once_and_each_request_closed_once(events)
    admitted = {e.request_id: e for e in by_type(events, RequestAdmitted)}
    settled = {e.request_id: e for e in by_type(events, RequestSettled)}
    expired = {e.request_id: e for e in by_type(events, HoldExpired)}

    ok = {o.request_id for o in kill.traffic if o.kind == "ok"} | set(kill.survived)
    assert ok <= set(settled), f"200 answers without a settlement: {ok - set(settled)}"
    assert set(cut) <= set(expired), f"the killed process's streams not expired: {set(cut) - set(expired)}"
    for rid, e in expired.items():
        assert dict(e.charged) == dict(admitted[rid].holds), (rid, e.charged, admitted[rid].holds)
        # only the dead process's holds expire: its pod id, its request-id prefix
        assert admitted[rid].pod == victim_pod and process_of(rid) == process_of(cut[0]), (rid, admitted[rid].pod)
    dead_prefix = dead_lease_prefix(events, cut)
    dead = {e.lease_id: e for e in by_type(events, LeaseGranted) if e.lease_id.startswith(dead_prefix)}
    lease_closes = Counter(e.lease_id for e in events if isinstance(e, (LeaseExpired, LeaseReturned)))
    assert dead and all(lease_closes[lid] == 1 for lid in dead), {lid: lease_closes[lid] for lid in dead}
    assert any(isinstance(e, LeaseExpired) and e.lease_id in dead for e in events), \
        f"no lease.expired for the killed process's leases {sorted(dead)}"
    granted = {e.lease_id for e in by_type(events, LeaseGranted) if e.amount_micro}
    leaked = {lid: lease_closes[lid] for lid in granted if lease_closes[lid] != 1}
    assert not leaked, f"granted leases not closed exactly once (returned or expired): {leaked}"
    balance = team_balance(events)
    assert balance.held == 0 and balance.settled > 0, balance
    # the archive holds every event of the log (SIGTERM's final pass), and its ledger equals the live one
    assert "0 difference(s)" in replay and "behind" not in replay, replay
    assert f"read {len(events)} archived event(s), skipped 0 unreadable" in replay, replay


def dead_lease_prefix(events: list[Event], cut: list[str]) -> str:
    """The killed process's lease-id prefix (its wallet's ``{pod}-{8 hex}-``): from a cut stream's lease."""
    admitted = next(e for e in events if isinstance(e, RequestAdmitted) and e.request_id == cut[0])
    return admitted.leases[TEAM_SCOPE].rsplit("-", 1)[0] + "-"


async def _open_slow(client: openai.AsyncOpenAI) -> tuple[str, Any]:
    """A slow stream past its first chunk: (request id, its chunk iterator)."""
    raw = await client.chat.completions.with_raw_response.create(
        model=ALIAS, messages=MSG, max_completion_tokens=SLOW_TOKENS, stream=True,
        stream_options={"include_usage": True},
        extra_headers={**SLOW_STREAM, "x-sim-output-tokens": str(SLOW_TOKENS)})
    chunks = raw.parse().__aiter__()
    await chunks.__anext__()
    return raw.headers["x-fb-request-id"], chunks


async def _finish(chunks: Any) -> bool:
    """Read a stream to its end: True when it ended with its usage chunk, False when it was cut."""
    last = None
    try:
        async for last in chunks:
            pass
    except openai.APIConnectionError:
        return False
    return last is not None and last.usage is not None


@dataclass
class Kill:
    """What ``_kill_mid_burst`` saw: the killed process, its cut streams, the others, the steady traffic."""

    pod: str
    cut: list[str]
    survived: list[str]
    traffic: list[Outcome]


async def _kill_mid_burst(stack: Stack, first: dict[int, int]) -> Kill:
    """Slow streams open on both processes and steady traffic; SIGKILL the process holding the most streams;
    keep sending until its restarted successor has answered."""
    traffic: list[Outcome] = []
    stopping = asyncio.Event()

    async def steady(client: openai.AsyncOpenAI) -> None:
        i = 0
        while not stopping.is_set():
            i += 1
            traffic.append(await chat(client, stream=i % 2 == 0, output_tokens=8, max_tokens=16))

    async with one_connection_per_request(stack, stack.key) as client:
        warm = await asyncio.gather(*(chat(client, stream=False, output_tokens=8, max_tokens=16) for _ in range(16)))
        assert {o.kind for o in warm} == {"ok"}, warm
        streams = await asyncio.gather(*(_open_slow(client) for _ in range(8)))
        rids = [rid for rid, _ in streams]

        def admitted() -> dict[str, RequestAdmitted] | None:
            found = {e.request_id: e for e in by_type(read_events(stack.events_path), RequestAdmitted)
                     if e.request_id in rids}
            return found if len(found) == len(rids) else None

        found = await asyncio.to_thread(wait_until, admitted, 5, "the slow streams' admissions in the log", stack)
        on_pod = Counter(e.pod for e in found.values())
        victim_pod = on_pod.most_common(1)[0][0]
        victim = int(victim_pod.rsplit("-", 1)[1])
        senders = [asyncio.create_task(steady(client)) for _ in range(4)]
        try:
            await asyncio.sleep(0.2)
            os.kill(first[victim], signal.SIGKILL)
            ended = dict(zip(rids, await asyncio.gather(*(_finish(chunks) for _, chunks in streams))))
            cut = [rid for rid in rids if found[rid].pod == victim_pod]
            survived = [rid for rid in rids if found[rid].pod != victim_pod]
            assert not any(ended[rid] for rid in cut), f"a stream of the killed process ended whole: {ended}"
            assert all(ended[rid] for rid in survived), \
                f"a stream of the surviving process was cut: {ended} ({on_pod})\n{tail(stack)}"

            # the owner starts the victim again under the same pod id, with a new pid ...
            def restarted() -> bool:
                again = [pid for i, pid, pod in process_lines(stack)[2:] if i == victim and pod == victim_pod]
                return bool(again) and worker_pids(stack).get(victim) == again[-1] != first[victim]

            await asyncio.to_thread(wait_until, restarted, 20, f"gateway process {victim} started again", stack)
            # ... and the new process answers: a 200 admitted under the victim's pod id by another process
            def new_process_answered() -> bool:
                ok = {o.request_id for o in list(traffic) if o.kind == "ok"}
                return any(e.pod == victim_pod and e.request_id in ok and process_of(e.request_id) != process_of(cut[0])
                           for e in by_type(read_events(stack.events_path), RequestAdmitted))

            await asyncio.to_thread(wait_until, new_process_answered, 20, "a 200 from the restarted process", stack,
                                    0.3)
        finally:
            stopping.set()
            await asyncio.gather(*senders, return_exceptions=True)
    others = [o for o in traffic if o.kind not in ("ok", "dropped")]
    assert others == [], f"traffic around the kill answered other than 200 or a dropped connection: {others[:5]}"
    return Kill(victim_pod, cut, survived, traffic)


def stopped_and_replayed(stack: Stack) -> tuple[list[Event], str]:
    """Stop the owner gracefully (exit 0), then: the log's events and ``farebox replay``'s report."""
    assert stop(stack.gateway) == 0, tail(stack)
    return read_events(stack.events_path), _replay(stack)


def assert_each_event_once_and_each_request_closed_once(events: list[Event]) -> None:
    ids = Counter(e.id for e in events)
    assert [i for i, n in ids.items() if n > 1] == [], "event ids in the log more than once"
    assert_closed_exactly_once(events)


def _replay(stack: Stack) -> str:
    today = datetime.now(timezone.utc).date()
    done = subprocess.run([sys.executable, "-m", "farebox", "replay", "--config", str(stack.config),
                           "--from", str(today - timedelta(days=1)), "--to", str(today + timedelta(days=1))],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    report = done.stdout + done.stderr
    assert done.returncode == 0, f"farebox replay exited {done.returncode}:\n{report}"
    return report


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_kill_9_of_the_owner_stops_its_gateways_and_a_restart_recovers(tmp_path) -> None:
    """The owner killed: its gateway processes stop (they cannot record); ``serve`` started again rebuilds its
    ledger processor from the log and expires the leases the dead gateways held and any hold whose settlement
    died with the owner (charged in full); no event doubled, every request closed once, replay equals live."""
    with running_stack(tmp_path / "stack", mutate=short_ttls, serve_args=WORKERS) as stack:
        client = openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key, max_retries=0)

        def traffic(n: int) -> list[str]:
            with explained(stack):
                return [client.chat.completions.create(
                    model=ALIAS, messages=[{"role": "user", "content": f"hi {i}"}], max_tokens=20,
                    extra_headers={"Connection": "close"}).model_extra["x_farebox"]["request_id"] for i in range(n)]

        before = traffic(12)
        old = worker_pids(stack)
        stack.restart_gateway(kill=True)  # SIGKILL the owner, then `serve --workers 2` again
        wait_until(lambda: not any(_alive(pid) for pid in old.values()), 10, "the old gateway processes gone", stack)
        assert set(worker_pids(stack).values()).isdisjoint(old.values())
        after = traffic(12)

        def old_leases_closed() -> list[Event] | None:  # they died holding leases: the new owner expires them
            ev = read_events(stack.events_path)
            granted = {e.lease_id for e in by_type(ev, LeaseGranted) if e.amount_micro}
            shut = Counter(e.lease_id for e in ev if isinstance(e, (LeaseExpired, LeaseReturned)))
            old_ones = {lid for lid in granted if any(lid.startswith(f"{pod}-") for pod in
                                                      {e.pod for e in by_type(ev, RequestAdmitted)
                                                       if e.request_id in before})}
            return ev if old_ones and all(shut[lid] == 1 for lid in old_ones) else None

        wait_until(old_leases_closed, LEASE_TTL_S + 15, "the dead gateways' leases closed once", stack, interval=0.3)
        wait_until(lambda: all_closed(stack), HOLD_TTL_S + 15, "every admitted request closed", stack, interval=0.3)
        events, replay = stopped_and_replayed(stack)

    assert_each_event_once_and_each_request_closed_once(events)
    settled = {e.request_id for e in by_type(events, RequestSettled)}
    assert set(after) <= settled
    # a settlement the owner had not made durable when it was killed is lost with it, as the SQLite writer's
    # queue is in one process: that request's hold is charged in full by the restarted owner instead
    admitted = {e.request_id: e for e in by_type(events, RequestAdmitted)}
    for e in by_type(events, HoldExpired):
        assert e.request_id in before and dict(e.charged) == dict(admitted[e.request_id].holds), e
    assert any(isinstance(e, LeaseExpired) for e in events), "the dead gateways' leases were not expired"
    assert "0 difference(s)" in replay and "behind" not in replay, replay
