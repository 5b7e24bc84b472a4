"""Waiting for in-flight holds (embedded): FIFO per scope, woken by settlements, bounded by the caller's wait;
the wait header's bad values; every budget refusal recorded as ``request.refused``."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.balances import Ledger
from ledger.events import HoldExpired, RequestAdmitted, RequestSettled
from ledger.refusals import RequestRefused
from ledger.usage import TokenUsage
from proxy.admission.admit import admit
from proxy.admission.budget_port import BudgetAsk, Funding, budget_period, max_wait_s
from proxy.admission.budgets import LedgerBudgets
from proxy.errors import BudgetRefused, InvalidRequest, RateLimited, client_headers
from proxy.metering.meter import Meter
from proxy.metering.settlement import Tab, scopes_of
from tests.proxy.fakes import NOW_S, MemoryLog, example_tree, key, runtime, snapshot

KOLKATA = ZoneInfo("Asia/Kolkata")
AT = datetime.fromtimestamp(NOW_S, timezone.utc)


def team_snapshot(limit: str = "1.00"):
    tree = example_tree()
    tree["budgets"]["scopes"] = [{"scope": "team:platform", "monthly_limit": limit, "soft_pct": 80}]
    _, record = key()
    return snapshot(tree, [record])


SNAP = team_snapshot()
K = next(iter(SNAP.keys.values()))
SCOPES = scopes_of(K, None)


def ask(rid: str, hold: int, wait_s: float = 5.0) -> BudgetAsk:
    return BudgetAsk(rid, SCOPES, hold, 100, 50, NOW_S, learned_micro=hold, key_id=K.key_id, max_wait_s=wait_s)


def admitted(rid: str, hold: int) -> RequestAdmitted:
    return RequestAdmitted(time=AT, request_id=rid, team=K.team, key_id=K.key_id, business_unit="retail", app=K.app,
                           run_id=None, alias="chat-default", data_class="internal", est_input_tokens=100,
                           max_output_tokens=50, holds=dict.fromkeys(SCOPES, hold), currency="INR", price_version=1,
                           pod="p", hold_ttl_s=900, stream=False)


def settled(rid: str, cost: int) -> RequestSettled:
    return RequestSettled(time=AT + timedelta(seconds=1), request_id=rid, team=K.team, final_status=200, attempts=1,
                          deployment="d", usage=TokenUsage(input=1, output=1), cost_micro=cost, currency="INR",
                          cost_by_scope=dict.fromkeys(SCOPES, cost), hold_released=dict.fromkeys(SCOPES, 0),
                          overrun_micro=0, cache_hit=False, latency_ms=1)


async def funded(budgets: LedgerBudgets, a: BudgetAsk) -> Funding:
    """Admit and fold the admission, as the admission shell does in the same turn."""
    funding = await budgets.admit(SNAP, a)
    budgets.fold(admitted(a.request_id, funding.hold_micro or a.hold_micro))
    return funding


async def spin() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_waiter_is_funded_when_a_settlement_frees_the_money() -> None:
    budgets = LedgerBudgets(Ledger(KOLKATA))
    await funded(budgets, ask("first", 900_000))
    waiting = asyncio.create_task(funded(budgets, ask("second", 500_000)))
    await spin()
    assert not waiting.done() and budgets.queue.waiting("team:platform") == 1
    budgets.fold(settled("first", 100_000))  # 900k held -> 100k spent: 900k free
    funding = await asyncio.wait_for(waiting, 1)
    assert funding.hold_micro == 500_000 and budgets.queue.waiting("team:platform") == 0


async def test_waiters_are_funded_in_arrival_order_and_a_newcomer_queues_behind() -> None:
    budgets = LedgerBudgets(Ledger(KOLKATA))
    await funded(budgets, ask("first", 800_000))
    order: list[str] = []

    async def one(rid: str, hold: int) -> None:
        await funded(budgets, ask(rid, hold))
        order.append(rid)

    big = asyncio.create_task(one("big", 600_000))
    await spin()
    small = asyncio.create_task(one("small", 100_000))  # would fit now, but "big" came first
    await spin()
    assert order == [] and budgets.queue.waiting("team:platform") == 2
    budgets.fold(settled("first", 200_000))  # 800k free: big first, then small
    await asyncio.wait_for(asyncio.gather(big, small), 1)
    assert order == ["big", "small"]


async def test_an_expiry_wakes_the_queue_too() -> None:
    budgets = LedgerBudgets(Ledger(KOLKATA))
    await funded(budgets, ask("first", 700_000))
    waiting = asyncio.create_task(funded(budgets, ask("second", 400_000)))
    await spin()
    budgets.fold(HoldExpired(time=AT, request_id="first", team=K.team, charged=dict.fromkeys(SCOPES, 500_000),
                             currency="INR"))
    assert (await asyncio.wait_for(waiting, 1)).hold_micro == 400_000


async def test_the_wait_ends_in_budget_reserved_with_retry_after() -> None:
    budgets = LedgerBudgets(Ledger(KOLKATA))
    await funded(budgets, ask("first", 900_000))
    with pytest.raises(BudgetRefused) as err:
        await budgets.admit(SNAP, ask("second", 500_000, wait_s=0.05))
    exc = err.value
    assert exc.code == "budget_reserved" and exc.status == 429 and exc.scope == "team:platform"
    assert exc.headers["x-should-retry"] == "true" and int(exc.headers["Retry-After"]) >= 1
    assert "held by requests in flight" in exc.message
    assert budgets.queue.waiting("team:platform") == 0  # it left the queue


async def test_settled_spend_short_of_the_estimate_is_exhausted_at_once() -> None:
    budgets = LedgerBudgets(Ledger(KOLKATA))
    await funded(budgets, ask("first", 900_000))
    budgets.fold(settled("first", 900_000))
    with pytest.raises(BudgetRefused) as err:
        await budgets.admit(SNAP, ask("second", 500_000, wait_s=5))
    assert err.value.code == "budget_exhausted" and client_headers(err.value)["x-should-retry"] == "false"
    assert "Retry-After" not in err.value.headers


@settings(max_examples=15, deadline=None)
@given(st.lists(st.tuples(st.integers(100_000, 900_000), st.integers(0, 40), st.integers(0, 30)),
                min_size=1, max_size=8))
def test_nothing_waits_past_its_deadline_and_waiters_are_served_in_order(arrivals) -> None:
    """Random holds, waits (ms) and settle delays (ms): a refusal after waiting comes at or after the request's
    deadline and well before twice it; whatever is funded from the queue is funded in arrival order."""

    async def scenario() -> None:
        budgets = LedgerBudgets(Ledger(KOLKATA))
        loop = asyncio.get_running_loop()
        funded_order: list[int] = []

        async def one(i: int, hold: int, wait_ms: int, settle_ms: int) -> None:
            started = loop.time()
            try:
                await funded(budgets, ask(f"r{i}", hold, wait_ms / 1000))
            except BudgetRefused as exc:
                assert exc.code in ("budget_reserved", "budget_exhausted")
                if exc.code == "budget_reserved":
                    assert loop.time() - started >= wait_ms / 1000 - 0.002
                return
            funded_order.append(i)
            await asyncio.sleep(settle_ms / 1000)
            budgets.fold(settled(f"r{i}", hold // 2))

        await asyncio.gather(*(one(i, *a) for i, a in enumerate(arrivals)))
        assert funded_order == sorted(funded_order)
        bal = budgets.ledger.balance("team:platform", budget_period(SNAP, NOW_S))
        assert bal.held == 0

    asyncio.run(scenario())


def test_the_wait_header_is_checked() -> None:
    assert max_wait_s(None, 2.0, 30.0) == 2.0
    assert max_wait_s("0", 2.0, 30.0) == 0.0 and max_wait_s("1500", 2.0, 30.0) == 1.5
    for bad in ("-1", "1.5", "soon", "", "30001", "²"):
        with pytest.raises(InvalidRequest) as err:
            max_wait_s(bad, 2.0, 30.0)
        assert err.value.param == "x-fb-max-wait-ms" and "x-fb-max-wait-ms" in err.value.message


def test_final_refusals_tell_the_sdk_not_to_retry() -> None:
    assert client_headers(InvalidRequest("bad"))["x-should-retry"] == "false"
    assert client_headers(RateLimited("slow down", headers={"Retry-After": "3"}))["x-should-retry"] == "true"
    assert "x-should-retry" not in client_headers(InvalidRequest("down", status=503))


async def test_every_budget_refusal_is_recorded_as_request_refused() -> None:
    snap = team_snapshot("0.10")
    k = next(iter(snap.keys.values()))
    ledger = Ledger(KOLKATA)
    log = MemoryLog()
    budgets = LedgerBudgets(ledger)
    rt = runtime(snap, budgets=budgets, log=log, fold=budgets.fold)
    cands = [snap.deployments[d] for d in snap.aliases["chat-default"].deployments]

    async def one(i: int, wait_s: float) -> str:
        tab = Tab(snap, f"r{i}", k, snap.aliases["chat-default"], None, "internal", False, scopes_of(k, None))
        meter = Meter(rt, tab)
        meter.max_wait_s = wait_s
        try:
            await admit(rt, meter, cands, 100, 50)
        except BudgetRefused as exc:
            return exc.code or ""
        return "admitted"

    outcomes = [await one(0, 0.0), await one(1, 0.0), await one(2, 0.01)]
    assert outcomes[0] == "admitted" and outcomes[1:] == ["budget_reserved", "budget_reserved"]
    refused = [e for e in log.events if isinstance(e, RequestRefused)]
    assert [(e.request_id, e.error_code, e.scope) for e in refused] == [
        ("r1", "budget_reserved", "team:platform"), ("r2", "budget_reserved", "team:platform")]
    assert [t for t in log.types() if t.startswith("request.")] == [
        "request.admitted", "request.refused", "request.refused"]
