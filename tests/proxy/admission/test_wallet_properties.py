"""Properties of distributed admission (the pod wallets, hypothesis) over random arrivals, holds,
settlements and projection readings, against the simulated ledger processor (``lease_sim``):

* the ledger invariant: settled + held + leased-unspent <= limit, at every projection tick and at the end;
* nothing waits past its deadline (``lease_wait_s``, plus the loop's scheduling slack);
* ``budget_exhausted`` only when the rule says so: the ledger's settled spend at that instant leaves
  less than the request's hold (the pod only knows a projection that lags the ledger);
* a healthy ledger never yields 503 ``budget_unavailable``; every request is admitted or told 429.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.leases import LeasePolicy
from proxy.admission.scope_states import ScopeStates
from proxy.errors import RateLimited
from tests.proxy.admission.lease_sim import PERIOD, SCOPE, Processor, wallets_for

WAIT_S = 0.12
SLACK_S = 0.4  # a loaded test box delays timers; the bound is what matters, not its tightness

request = st.tuples(st.integers(0, 60),  # arrival, ms after the start
                    st.integers(500, 30_000),  # hold
                    st.integers(0, 100),  # cost, % of the hold
                    st.integers(0, 80))  # time to settle once admitted, ms


async def _scenario(limit: int, requests: list[tuple[int, int, int, int]], project_every_ms: int,
                    projection_stops_ms: int, last_pct: int) -> tuple[Counter, list[str]]:
    processor = Processor(limit=limit, rtt_s=0.006, policy=LeasePolicy(share=2, last_pct=last_pct))
    states = ScopeStates(fresh_s=0.05)
    wallets = wallets_for(processor, wait_s=WAIT_S, states=states, retry_s=0.02)
    loop = asyncio.get_running_loop()
    start = loop.time()
    outcomes: Counter = Counter()
    broken: list[str] = []

    def check_invariant(when: str) -> None:
        spent = processor.state.spent(PERIOD)
        if spent > limit:
            broken.append(f"{when}: spent {spent} > limit {limit}")

    async def projector() -> None:  # the worker's projection, read by the pod; it may stop (stale)
        while True:
            await asyncio.sleep(project_every_ms / 1000)
            check_invariant("tick")
            if (loop.time() - start) * 1000 < projection_stops_ms:
                processor.project(states, loop.time())

    async def one(i: int, arrive_ms: int, hold: int, cost_pct: int, settle_ms: int) -> None:
        await asyncio.sleep(arrive_ms / 1000)
        rid = f"r{i}"
        asked = loop.time()
        try:
            leases = await wallets.admit(rid, [SCOPE], hold, period=PERIOD)
        except RateLimited as exc:
            waited = loop.time() - asked
            outcomes[exc.code] += 1
            if waited > WAIT_S + SLACK_S:
                broken.append(f"{rid} waited {waited:.3f} s")
            left = limit - processor.state.totals(PERIOD).settled
            if exc.code == "budget_exhausted" and left >= hold:
                broken.append(f"{rid} refused budget_exhausted with {left} settled-free >= hold {hold}")
            return
        except Exception as exc:  # noqa: BLE001 - 503 or a bug: both break the property
            outcomes[type(exc).__name__] += 1
            return
        processor.admitted(rid, hold, leases)
        outcomes["admitted"] += 1
        await asyncio.sleep(settle_ms / 1000)
        charge = hold * cost_pct // 100
        wallets.settle(rid, {SCOPE: charge})
        processor.settled(rid, hold, charge, leases)

    ticker = asyncio.create_task(projector())
    try:
        await asyncio.gather(*(one(i, *r) for i, r in enumerate(requests)))
    finally:
        ticker.cancel()
    wallets.close()
    await asyncio.sleep(processor.rtt_s)
    check_invariant("end")
    return outcomes, broken


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(limit=st.integers(5_000, 300_000), requests=st.lists(request, min_size=1, max_size=40),
       project_every_ms=st.integers(5, 40), projection_stops_ms=st.integers(0, 400), last_pct=st.integers(0, 20))
def test_wallet_admission_keeps_the_invariant_bounds_waits_and_refuses_exhausted_only_by_the_rule(
        limit, requests, project_every_ms, projection_stops_ms, last_pct) -> None:  # type: ignore[no-untyped-def]
    outcomes, broken = asyncio.run(_scenario(limit, requests, project_every_ms, projection_stops_ms, last_pct))
    assert broken == []
    assert set(outcomes) <= {"admitted", "budget_exhausted", "budget_reserved"}, outcomes
    assert sum(outcomes.values()) == len(requests)
