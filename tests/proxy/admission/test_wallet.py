"""Wallets (distributed admission) against an in-process ledger processor (``lease_sim``)."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import replace

import pytest

from ledger.leases import LeasePolicy, ScopeEntry
from proxy.admission.budget_port import BudgetAsk, ScopeState, budget_period
from proxy.admission.lease_budgets import LeaseBudgets
from proxy.admission.wallet import BudgetUnavailable, WalletPolicy, Wallets
from proxy.errors import GatewayError, InvalidRequest, RateLimited
from tests.proxy.admission.lease_sim import NOW, PERIOD, SCOPE, Processor, wallets_for
from tests.proxy.fakes import example_tree, snapshot


async def burst(wallets: Wallets, processor: Processor, n: int, hold: int) -> Counter:
    outcomes: Counter = Counter()

    async def one(i: int) -> None:
        try:
            leases = await wallets.admit(f"r{i}", [SCOPE], hold, period=PERIOD)
        except RateLimited as exc:
            outcomes[exc.code] += 1
            return
        except BudgetUnavailable:
            outcomes["budget_unavailable"] += 1
            return
        processor.admitted(f"r{i}", hold, leases)  # request.admitted, in the same step as the funding
        outcomes["admitted"] += 1

    await asyncio.gather(*(one(i) for i in range(n)))
    return outcomes


async def test_a_burst_near_the_limit_is_funded_in_batches_and_the_rest_refused_with_429():
    # 200 requests of 1,000 on a scope with 50,500 left: 50 fit, 150 must be refused with 429, never 503;
    # the 50,000 is held by requests in flight, not spent: the 150 are told to retry (budget_reserved)
    processor = Processor(limit=50_500)
    wallets = wallets_for(processor, wait_s=1.0)
    outcomes = await burst(wallets, processor, 200, 1_000)
    assert outcomes == Counter(admitted=50, budget_reserved=150)
    # batched: slices of what is left (a twelfth... a quarter here: one pod), then the exact demand in the
    # last 5 %, then a refusal: a handful of round trips for 200 requests, not one per request
    assert len(processor.requests) <= 20
    assert processor.state.totals(PERIOD).held == 50_000
    assert processor.state.spent(PERIOD) <= processor.limit


async def test_budget_exhausted_needs_a_fresh_projection_whose_settled_spend_leaves_less_than_the_hold():
    processor = Processor(limit=50_500)
    wallets = wallets_for(processor, wait_s=1.0)
    assert await burst(wallets, processor, 50, 1_000) == Counter(admitted=50)
    # the 50 settled at their holds (as the worker projects them): 500 left, less than any hold
    row = {"period": PERIOD, "state": "hard", "settled": "50000", "held": "0", "leased": "500", "limit": "50500"}
    now = asyncio.get_running_loop().time()
    wallets.states.update({SCOPE: row}, now)
    assert await burst(wallets, processor, 10, 1_000) == Counter(budget_exhausted=10)
    # a stale reading of the same is no evidence: the ledger is asked, refuses, and the answer is "retry"
    wallets.states.update({SCOPE: row}, now - 10)
    assert await burst(wallets, processor, 10, 1_000) == Counter(budget_reserved=10)


async def test_a_batched_ask_carries_the_waiting_demand_and_its_smallest_hold():
    processor = Processor(limit=10_000_000)
    wallets = wallets_for(processor)
    outcomes = await burst(wallets, processor, 20, 3_000)
    assert outcomes == Counter(admitted=20)
    first = processor.requests[0]
    assert (first.amount_micro, first.least_micro) == (60_000, 3_000)


async def test_the_projection_at_hard_refuses_at_once_without_asking():
    processor = Processor(limit=1_000_000)
    wallets = wallets_for(processor)
    now = asyncio.get_running_loop().time()
    row = {"period": PERIOD, "state": "hard", "settled": "1000000", "held": "0", "leased": "0", "limit": "1000000"}
    wallets.states.update({SCOPE: row}, now)
    with pytest.raises(RateLimited) as refused:
        await wallets.admit("r1", [SCOPE], 1_000, period=PERIOD)
    assert refused.value.code == "budget_exhausted" and processor.requests == []
    # last month's "hard" (the month turned, not re-projected yet) or a stale reading is not trusted
    wallets.states.update({SCOPE: {**row, "period": "2026-10"}}, now)
    assert await wallets.admit("r2", [SCOPE], 1_000, period=PERIOD)
    wallets.states.update({SCOPE: row}, now - 10)
    assert await wallets.admit("r3", [SCOPE], 1_000, period=PERIOD)


async def test_no_answer_in_time_is_503_and_kafka_down_spends_what_is_held_then_fails_closed():
    processor = Processor(limit=1_000_000)
    processor.answer = False
    wallets = wallets_for(processor, wait_s=0.05)
    with pytest.raises(BudgetUnavailable):
        await wallets.admit("r1", [SCOPE], 1_000, period=PERIOD)

    up = [True]
    processor = Processor(limit=1_000_000)
    wallets = wallets_for(processor, kafka_up=lambda: up[0], emergency_micro=2_500)
    assert await wallets.admit("r1", [SCOPE], 1_000, period=PERIOD)  # a slice of 250,000 arrives
    up[0] = False
    for i in range(249):
        await wallets.admit(f"k{i}", [SCOPE], 1_000, period=PERIOD)  # spends the lease, no round trip
    emergency = [await wallets.admit(f"e{i}", [SCOPE], 1_000, period=PERIOD) for i in range(2)]
    assert all(lease[SCOPE].startswith("emergency/") for lease in emergency)  # the allowance, once
    with pytest.raises(BudgetUnavailable):
        await wallets.admit("e3", [SCOPE], 1_000, period=PERIOD)
    assert len(processor.requests) == 1


async def test_round_trips_are_observed_and_free_requests_need_no_lease():
    seen: list[float] = []
    processor = Processor(limit=1_000_000, rtt_s=0.02)
    wallets = Wallets("pod-a", processor.emit, lambda: NOW, WalletPolicy(), observe_rtt=seen.append)
    processor.wallets = wallets
    assert await wallets.admit("free", [SCOPE], 0, period=PERIOD) == {}
    assert processor.requests == []
    await wallets.admit("r1", [SCOPE], 1_000, period=PERIOD)
    assert len(seen) == 1 and seen[0] >= 0.015


async def test_settling_below_the_hold_is_spent_again_and_close_returns_every_lease():
    processor = Processor(limit=10_000_000)
    wallets = wallets_for(processor)
    outcomes = await burst(wallets, processor, 10, 1_000)
    assert outcomes == Counter(admitted=10)
    lease = wallets.leases[SCOPE][-1]
    granted = lease.granted
    for i in range(10):
        wallets.settle(f"r{i}", {SCOPE: 400})  # each cost 400 of its 1,000 hold: 600 back to the lease
    assert lease.balance == granted - 4_000
    wallets.close()
    await asyncio.sleep(processor.rtt_s)
    totals = processor.state.totals(PERIOD)
    assert wallets.leases == {} and totals.leased == 0  # what was not spent went back to the ledger
    assert totals.held == 10_000  # the admissions' holds stay until their settlements arrive


async def test_a_lease_still_asked_for_at_shutdown_is_returned_unspent():
    processor = Processor(limit=10_000_000, rtt_s=0.05)
    wallets = wallets_for(processor)
    waiting = asyncio.create_task(wallets.admit("r1", [SCOPE], 1_000, period=PERIOD))
    await asyncio.sleep(0.01)  # the ask is out; its grant comes after the pod stopped listening
    waiting.cancel()
    wallets.close()
    await asyncio.sleep(0.06)  # the processor decides the grant; nobody hears it
    totals = processor.state.totals(PERIOD)
    assert processor.requests and totals.leased == 0 and not processor.state.open_leases()


async def test_waiting_out_a_contended_scope_is_429_and_a_silent_ledger_503():
    # the ledger answers, but slices of 1,000 go to the requests ahead: the last ones wait out lease_wait_s
    processor = Processor(limit=10_000_000, rtt_s=0.02, policy=LeasePolicy(share=1, last_pct=0, max_slice_micro=1_000))
    wallets = wallets_for(processor, wait_s=0.3)  # 15 round trips: a stalled loop still hears the ledger
    outcomes = await burst(wallets, processor, 30, 1_000)
    assert outcomes["admitted"] >= 2 and outcomes["budget_reserved"] > 0 and "budget_unavailable" not in outcomes
    assert "budget_exhausted" not in outcomes  # no projection says the money is spent: in flight, retry


# --- the BudgetPort adapter over the wallets (proxy/admission/lease_budgets.py) ----------------------


def alpha_snapshot(per_request_cap: str = "50.00"):  # type: ignore[no-untyped-def]
    tree = example_tree()
    tree["teams"].append({"name": "alpha", "business_unit": "retail"})
    tree["budgets"]["per_request_cap"] = per_request_cap
    tree["budgets"]["scopes"] = [{"scope": SCOPE, "monthly_limit": "1.00", "soft_pct": 80,
                                  "downgrade_alias": "chat-default"}]
    return snapshot(tree)


async def test_lease_budgets_fund_limited_scopes_and_settle_through_the_wallets():
    processor = Processor(limit=1_000_000)
    budgets = LeaseBudgets(wallets_for(processor), hold_ttl_s=900)
    snap = alpha_snapshot()
    now_s = NOW.timestamp()
    funding = await budgets.admit(snap, BudgetAsk("r1", ["key:k1", SCOPE], 1_000, 10, 10, now_s))
    assert list(funding.leases) == [SCOPE] and funding.events == [] and funding.remaining_micro is None
    lease = budgets.wallets.leases[SCOPE][-1]
    before = lease.balance
    budgets.settle("r1", {SCOPE: 400})
    assert lease.balance == before + 600  # hold 1,000 replaced by the charge of 400
    await budgets.admit(snap, BudgetAsk("r2", [SCOPE], 1_000, 10, 10, now_s))
    budgets.release("r2")
    assert lease.balance == before + 600  # released: the whole hold is back
    assert await budgets.state(snap, SCOPE, None, now_s) is None  # no projection reader: nothing readable here


async def test_lease_budgets_read_a_scopes_balance_from_the_workers_projection():
    snap = alpha_snapshot()
    now_s = NOW.timestamp()
    period = budget_period(snap, now_s)
    rows = {SCOPE: {"period": period, "settled": "1200", "held": "300", "leased": "4000", "overrun": "7",
                    "requests": "5", "limit": "10000", "state": "soft"},
            "team:old": {"period": "2001-01", "settled": "9", "held": "0", "leased": "0", "overrun": "0",
                         "requests": "1", "limit": "", "state": "ok"}}
    asked: list[str] = []

    async def read_scope(scope: str) -> dict[str, str]:
        asked.append(scope)
        return rows.get(scope, {})

    budgets = LeaseBudgets(wallets_for(Processor(limit=1_000_000)), hold_ttl_s=900, read_scope=read_scope)
    state = await budgets.state(snap, SCOPE, None, now_s)
    assert state == ScopeState(period, 1200, 300, 7, 5, True, leased=4000)
    assert await budgets.state(snap, SCOPE, period, now_s) == state
    # never projected, or projected only for an earlier period: nothing spent yet this period
    assert await budgets.state(snap, "team:new", None, now_s) == ScopeState(period, 0, 0, 0, 0, False)
    assert await budgets.state(snap, "team:old", None, now_s) == ScopeState(period, 0, 0, 0, 0, False)
    assert asked == [SCOPE, SCOPE, "team:new", "team:old"]
    with pytest.raises(InvalidRequest) as err:  # the projection holds the current period only
        await budgets.state(snap, SCOPE, "2001-01", now_s)
    assert err.value.param == "period" and "2001-01" in err.value.message

    async def away(scope: str) -> dict[str, str]:
        raise ConnectionError("redis is away")

    with pytest.raises(GatewayError) as err:
        await LeaseBudgets(budgets.wallets, 900, read_scope=away).state(snap, SCOPE, None, now_s)
    assert (err.value.status, err.value.code) == (503, "budget_unavailable")


async def test_lease_budgets_refuse_above_the_per_request_cap_before_asking():
    processor = Processor(limit=1_000_000)
    budgets = LeaseBudgets(wallets_for(processor), hold_ttl_s=900)
    with pytest.raises(InvalidRequest) as err:
        await budgets.admit(alpha_snapshot("0.001"), BudgetAsk("r1", [SCOPE], 2_000, 10, 10, NOW.timestamp()))
    assert err.value.code == "request_cost_cap_exceeded" and processor.requests == []


async def test_lease_budgets_downgrade_from_the_projection():
    budgets = LeaseBudgets(wallets_for(Processor(limit=1_000_000)), hold_ttl_s=900)
    snap = alpha_snapshot()
    loop_now = asyncio.get_running_loop().time()
    row = {"period": PERIOD, "state": "soft", "settled": "900000", "held": "0", "leased": "0", "limit": "1000000"}
    budgets.wallets.states.update({SCOPE: row}, loop_now)
    assert budgets.downgrade_target(snap, [SCOPE], NOW.timestamp()) == "chat-default"


async def test_unfunded_after_the_wait_is_reserved_when_settled_spend_leaves_the_hold():
    wallets = wallets_for(Processor(limit=1_000_000))
    now = asyncio.get_running_loop().time()
    row = {"period": PERIOD, "state": "hard", "settled": "200000", "held": "500000", "leased": "300000",
           "limit": "1000000"}
    wallets.states.update({SCOPE: row}, now)
    reserved = wallets._after_wait(SCOPE, 1_000, PERIOD, now)
    assert reserved.code == "budget_reserved" and reserved.headers["x-should-retry"] == "true"
    assert int(reserved.headers["Retry-After"]) >= 1 and reserved.scope == SCOPE
    wallets.states.update({SCOPE: {**row, "settled": "999500"}}, now)  # settled spend leaves less than the hold
    spent = wallets._after_wait(SCOPE, 1_000, PERIOD, now)
    assert spent.code == "budget_exhausted" and "Retry-After" not in spent.headers
    # a stale reading is no evidence either way: retry, never a final refusal on old news
    assert wallets._after_wait(SCOPE, 1_000, PERIOD, now + 60).code == "budget_reserved"


def _committed(wallets: Wallets, settled: int, limit: int, state: str = "hard") -> None:
    row = {"period": PERIOD, "state": state, "settled": str(settled), "held": str(limit - settled), "leased": "0",
           "limit": str(limit)}
    wallets.states.update({SCOPE: row}, asyncio.get_running_loop().time())


async def test_money_in_flight_is_waited_for_not_refused_and_funded_when_holds_settle():
    # 10 holds of 1,000 commit the whole 10,000; nothing is settled, so an 11th request waits instead of
    # budget_exhausted, and is funded from the lease once two holds settle below their hold
    processor = Processor(limit=10_000)
    wallets = wallets_for(processor, retry_s=0.02)
    assert await burst(wallets, processor, 10, 1_000) == Counter(admitted=10)
    wallets.policy = replace(wallets.policy, lease_wait_s=0.05)
    _committed(wallets, settled=0, limit=10_000)
    waiting = asyncio.create_task(wallets.admit("late", [SCOPE], 1_000, period=PERIOD, max_wait_s=2.0))
    await asyncio.sleep(0.2)  # past lease_wait_s: still waiting, because the money is only committed
    assert not waiting.done()
    for rid in ("r0", "r1"):  # each costs 200 of its 1,000: the worker folds it, the projection says so
        lease = wallets.funded[rid][SCOPE].lease_id
        wallets.settle(rid, {SCOPE: 200})
        processor.state.apply_entry(ScopeEntry("close", SCOPE, f"{rid}/settled", rid, PERIOD, 1_000, 200, lease, NOW))
    _committed(wallets, settled=400, limit=10_000, state="ok")
    assert SCOPE in await asyncio.wait_for(waiting, 1.0)
    assert processor.state.spent(PERIOD) <= processor.limit


async def test_a_refused_ask_with_money_in_flight_waits_then_is_reserved_and_spent_money_is_final():
    processor = Processor(limit=10_000)
    wallets = wallets_for(processor, retry_s=0.02)
    assert await burst(wallets, processor, 10, 1_000) == Counter(admitted=10)
    wallets.policy = replace(wallets.policy, lease_wait_s=0.05)
    _committed(wallets, settled=5_000, limit=10_000, state="ok")  # not hard yet: the pod asks, and gets 0
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(RateLimited) as reserved:
        await wallets.admit("late", [SCOPE], 1_000, period=PERIOD, max_wait_s=0.3)
    assert reserved.value.code == "budget_reserved" and 0.3 <= loop.time() - started < 1.0
    assert len(processor.requests) >= 3  # asked again while it waited
    _committed(wallets, settled=9_500, limit=10_000)  # settled spend leaves less than the hold: final at once
    started = loop.time()
    with pytest.raises(RateLimited) as spent:
        await wallets.admit("later", [SCOPE], 1_000, period=PERIOD, max_wait_s=5.0)
    assert spent.value.code == "budget_exhausted" and loop.time() - started < 0.1
