"""Budget money through the ``BudgetPort``: the embedded decision (pure), the ledger adapter, and the
admission shell over it — exact under concurrency because the recorder appends, then folds, in the
same event-loop turn as the decision.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from ledger.balances import Ledger
from ledger.events import BudgetThresholdCrossed, RequestAdmitted, RequestSettled
from ledger.usage import TokenUsage
from proxy.admission.admit import admit, budget_headers
from proxy.admission.budget_port import BudgetAsk, Funding, budget_period
from proxy.admission.budgets import LedgerBudgets, Reserved, decide_hold
from proxy.errors import BudgetRefused, EventLogUnavailable, InvalidRequest, RateLimited
from proxy.limits import MemoryBuckets
from proxy.metering.meter import Meter
from proxy.metering.settlement import Tab, scopes_of
from tests.proxy.fakes import NOW_S, MemoryLog, example_tree, key, runtime, snapshot

KOLKATA = ZoneInfo("Asia/Kolkata")
HOLD = 99_000  # 100 input (at the dearest input rate, USD 3.75 per 1M) + 50 output (USD 15) tokens, 88 INR per USD


def limited_snapshot(team_limit: str = "1.00", soft_pct: int = 80):
    tree = example_tree()
    tree["budgets"]["scopes"] = [{"scope": "team:platform", "monthly_limit": team_limit, "soft_pct": soft_pct,
                                  "downgrade_alias": "chat-default"}]
    _, record = key()
    return snapshot(tree, [record])


def ask(snap, request_id: str = "r1", hold: int = HOLD) -> BudgetAsk:
    k = next(iter(snap.keys.values()))
    return BudgetAsk(request_id, scopes_of(k, None), hold, 100, 50, NOW_S)


def admitted(snap, request_id: str, hold: int) -> RequestAdmitted:
    k = next(iter(snap.keys.values()))
    return RequestAdmitted(time=datetime.fromtimestamp(NOW_S, timezone.utc), request_id=request_id, team=k.team,
                           key_id=k.key_id, business_unit="retail", app=k.app, run_id=None, alias="chat-default",
                           data_class="internal", est_input_tokens=100, max_output_tokens=50,
                           holds=dict.fromkeys(scopes_of(k, None), hold), currency="INR", price_version=1, pod="p",
                           hold_ttl_s=900, stream=False, leases={})


def test_decide_hold_funds_and_reports_the_tightest_remaining() -> None:
    snap = limited_snapshot()
    funding = decide_hold(Ledger(KOLKATA), snap, ask(snap), budget_period(snap, NOW_S))
    assert funding.remaining_micro == 1_000_000 - HOLD and funding.events == [] and not funding.soft
    assert budget_headers(snap, funding) == {"x-fb-budget-remaining": "0.901000", "x-fb-budget-currency": "INR"}


def test_decide_hold_refuses_what_settled_spend_leaves_too_little_for() -> None:
    snap = limited_snapshot()
    ledger = Ledger(KOLKATA)
    ledger.apply(admitted(snap, "earlier", 950_000))
    ledger.apply(settled(snap, "earlier", 950_000))
    with pytest.raises(BudgetRefused) as err:
        decide_hold(ledger, snap, ask(snap), budget_period(snap, NOW_S))
    assert err.value.code == "budget_exhausted" and "team:platform" in err.value.message
    assert err.value.scope == "team:platform" and err.value.headers == {"x-should-retry": "false"}


def test_decide_hold_says_wait_when_holds_in_flight_fill_the_budget() -> None:
    snap = limited_snapshot()
    ledger = Ledger(KOLKATA)
    ledger.apply(admitted(snap, "earlier", 950_000))
    assert decide_hold(ledger, snap, ask(snap), budget_period(snap, NOW_S)) == Reserved("team:platform")


def settled(snap, request_id: str, cost: int) -> RequestSettled:
    k = next(iter(snap.keys.values()))
    return RequestSettled(time=datetime.fromtimestamp(NOW_S + 1, timezone.utc), request_id=request_id, team=k.team,
                          final_status=200, attempts=1, deployment="d1", usage=TokenUsage(input=10, output=10),
                          cost_micro=cost, currency="INR", cost_by_scope=dict.fromkeys(scopes_of(k, None), cost),
                          hold_released=dict.fromkeys(scopes_of(k, None), 0), overrun_micro=0, cache_hit=False,
                          latency_ms=20)


def test_decide_hold_notices_the_soft_threshold_once() -> None:
    snap = limited_snapshot()
    ledger = Ledger(KOLKATA)
    ledger.apply(admitted(snap, "earlier", 750_000))
    funding = decide_hold(ledger, snap, ask(snap), budget_period(snap, NOW_S))
    assert [type(e) for e in funding.events] == [BudgetThresholdCrossed] and funding.soft
    for event in funding.events:
        ledger.apply(event)
    again = decide_hold(ledger, snap, ask(snap, "r2", 1), budget_period(snap, NOW_S))
    assert again.events == [] and again.soft  # crossed already: the header stays, the notice is not repeated
    assert LedgerBudgets(ledger).downgrade_target(snap, ask(snap).scopes, NOW_S) == "chat-default"


def test_the_per_request_cap_is_a_400_naming_the_parameter() -> None:
    snap = limited_snapshot()
    with pytest.raises(InvalidRequest) as err:
        decide_hold(Ledger(KOLKATA), snap, ask(snap, hold=51_000_000), budget_period(snap, NOW_S))
    assert err.value.param == "max_completion_tokens" and err.value.code == "request_cost_cap_exceeded"


async def test_ledger_state_is_what_was_folded() -> None:
    snap = limited_snapshot()
    ledger = Ledger(KOLKATA)
    ledger.apply(admitted(snap, "r1", 300))
    state = await LedgerBudgets(ledger).state(snap, "team:platform", None, NOW_S)
    assert state is not None and (state.held, state.settled, state.requests, state.leased) == (300, 0, 1, 0)


class YieldingBuckets(MemoryBuckets):
    """In-process buckets that give the loop away on every reservation, as a Redis round trip would."""

    async def reserve(self, items, now_us):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0)
        return self.reserve_now(items, now_us)


async def test_concurrent_admissions_never_overshoot_the_budget() -> None:
    snap = limited_snapshot()
    ledger = Ledger(KOLKATA)
    log = MemoryLog()
    rt = runtime(snap, budgets=LedgerBudgets(ledger), limits=YieldingBuckets(), log=log, fold=ledger.apply)
    k = next(iter(snap.keys.values()))
    cands = [snap.deployments[d] for d in snap.aliases["chat-default"].deployments]

    async def one(i: int) -> bool:
        tab = Tab(snap, f"r{i}", k, snap.aliases["chat-default"], None, "internal", False, scopes_of(k, None))
        try:
            await admit(rt, Meter(rt, tab), cands, 100, 50)
        except RateLimited:
            return False
        return True

    results = await asyncio.gather(*(one(i) for i in range(50)))
    assert sum(results) == 1_000_000 // HOLD  # exactly what fits: 10
    bal = ledger.balance("team:platform", budget_period(snap, NOW_S))
    assert bal.held == sum(results) * HOLD <= 1_000_000
    assert log.types().count("request.admitted") == sum(results)  # the ledger holds exactly what was appended


async def test_an_admission_the_log_refuses_is_released_and_answered_503() -> None:
    snap = limited_snapshot()
    ledger = Ledger(KOLKATA)
    log = MemoryLog()
    rt = runtime(snap, budgets=LedgerBudgets(ledger), log=log, fold=ledger.apply)
    k = next(iter(snap.keys.values()))
    tab = Tab(snap, "r1", k, snap.aliases["chat-default"], None, "internal", False, scopes_of(k, None))
    log.refuse = True
    with pytest.raises(EventLogUnavailable) as err:
        await admit(rt, Meter(rt, tab), [snap.deployments["sim-openai-mumbai"]], 100, 50)
    assert err.value.status == 503 and err.value.headers["Retry-After"] == "1"
    assert ledger.balance("team:platform", budget_period(snap, NOW_S)).held == 0  # nothing folded
    assert tab.plan is None and rt.recorder.failures == 1


def test_budget_headers_without_a_known_remaining() -> None:
    snap = limited_snapshot()
    assert budget_headers(snap, Funding({}, [], None, True)) == {"x-fb-budget-state": "soft"}
