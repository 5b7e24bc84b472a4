"""Properties of embedded budget admission (hypothesis), over random arrivals, holds, settlements, expiries.

The pure decision (``decide_hold``) with right-sized holds, the learner fed by
settlements, and the ledger folded from the events a gateway would record:

* the ledger invariant: settled + held - recorded overrun <= limit, always;
* ``budget_exhausted`` only when the rule says so (limit - settled < the estimate);
* total overshoot within recorded overrun, and <= 1% of the limit even when
  one key's outputs suddenly max out (the adversarial key).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.balances import Ledger
from ledger.events import HoldExpired, RequestAdmitted, RequestSettled
from ledger.hold_sizing import Sizing
from ledger.output_sketch import OutputLearner
from ledger.usage import TokenUsage
from proxy.admission.budget_port import BudgetAsk, Funding, budget_period
from proxy.admission.budgets import Exposure, decide_hold
from proxy.errors import BudgetRefused
from proxy.metering.settlement import scopes_of
from tests.proxy.fakes import NOW_S, example_tree, key, snapshot

KOLKATA = ZoneInfo("Asia/Kolkata")
LIMIT = 10_000_000
INPUT_COST = 10_000
PER_TOKEN = 100
KEYS = ("k0", "k1", "k2", "k3")  # k0 turns adversarial on a "flip"


def team_snapshot():
    tree = example_tree()
    tree["budgets"]["scopes"] = [{"scope": "team:platform", "monthly_limit": "10.00", "soft_pct": 80}]
    tree["budgets"].pop("per_request_cap", None)
    _, record = key()
    return snapshot(tree, [record])


arrive = st.tuples(st.just("arrive"), st.integers(0, len(KEYS) - 1), st.integers(50, 400))
settle = st.tuples(st.just("settle"), st.integers(0, 10_000), st.integers(0, 50))
expire = st.tuples(st.just("expire"), st.integers(0, 10_000), st.just(0))
flip = st.tuples(st.just("flip"), st.just(0), st.just(0))
ops = st.lists(st.one_of(arrive, arrive, arrive, settle, settle, expire, flip), min_size=1, max_size=400)


class World:
    def __init__(self) -> None:
        self.snap = team_snapshot()
        self.k = next(iter(self.snap.keys.values()))
        self.scopes = scopes_of(self.k, None)
        self.ledger = Ledger(KOLKATA)
        self.exposure = Exposure()
        self.learner = OutputLearner(min_samples=3)
        self.period = budget_period(self.snap, NOW_S)
        self.open: dict[str, tuple[str, int, int]] = {}  # request id -> (key, cap, hold)
        self.adversarial = False
        self.n = 0
        self.at = datetime.fromtimestamp(NOW_S, timezone.utc)

    def balance(self):
        return self.ledger.balance("team:platform", self.period)

    def arrive(self, key_id: str, cap: int) -> None:
        self.n += 1
        rid = f"r{self.n}"
        worst = INPUT_COST + cap * PER_TOKEN
        learned = INPUT_COST + self.learner.output_tokens(key_id, "a", cap) * PER_TOKEN
        ask = BudgetAsk(rid, self.scopes, worst, 100, cap, NOW_S, learned_micro=learned, key_id=key_id)
        try:
            outcome = decide_hold(self.ledger, self.snap, ask, self.period, self.exposure, Sizing())
        except BudgetRefused as exc:
            assert exc.code == "budget_exhausted"
            assert LIMIT - self.balance().settled < learned  # the rule: waiting could not help
            return
        if not isinstance(outcome, Funding):
            assert LIMIT - self.balance().settled >= learned  # reserved: the money is there, held
            return
        hold = outcome.hold_micro
        assert hold is not None and hold <= worst
        self.exposure.add(rid, key_id, worst - hold, self.scopes)
        self.ledger.apply(RequestAdmitted(
            time=self.at, request_id=rid, team=self.k.team, key_id=key_id, business_unit="retail", app=self.k.app,
            run_id=None, alias="a", data_class="internal", est_input_tokens=100, max_output_tokens=cap,
            holds=dict.fromkeys(self.scopes, hold), currency="INR", price_version=1, pod="p", hold_ttl_s=900,
            stream=False))
        self.open[rid] = (key_id, cap, hold)

    def settle(self, pick: int, per_mille: int) -> None:
        if not self.open:
            return
        rid = sorted(self.open)[pick % len(self.open)]
        key_id, cap, hold = self.open.pop(rid)
        out = cap if (self.adversarial and key_id == "k0") else cap * per_mille // 1000
        cost = INPUT_COST + out * PER_TOKEN
        self.exposure.remove(rid)
        self.ledger.apply(RequestSettled(
            time=self.at + timedelta(seconds=1), request_id=rid, team=self.k.team, final_status=200, attempts=1,
            deployment="d", usage=TokenUsage(input=100, output=out), cost_micro=cost, currency="INR",
            cost_by_scope=dict.fromkeys(self.scopes, cost), hold_released=dict.fromkeys(self.scopes, max(hold - cost, 0)),
            overrun_micro=max(cost - hold, 0), cache_hit=False, latency_ms=1))
        self.learner.observe(key_id, "a", out, cap)

    def expire(self, pick: int) -> None:
        if not self.open:
            return
        rid = sorted(self.open)[pick % len(self.open)]
        _, _, hold = self.open.pop(rid)
        self.exposure.remove(rid)
        self.ledger.apply(HoldExpired(time=self.at, request_id=rid, team=self.k.team,
                                      charged=dict.fromkeys(self.scopes, hold), currency="INR"))

    def check(self) -> None:
        bal = self.balance()
        assert bal.settled + bal.held - bal.overrun <= LIMIT


@settings(max_examples=60, deadline=None)
@given(ops)
def test_admission_keeps_the_invariant_and_refuses_exhausted_only_by_the_rule(steps) -> None:
    world = World()
    for op, a, b in steps:
        if op == "arrive":
            world.arrive(KEYS[a], b)
        elif op == "settle":
            world.settle(a, b)
        elif op == "expire":
            world.expire(a)
        else:
            world.adversarial = True
        world.check()
    while world.open:  # the burst ends: everything in flight settles
        world.settle(0, 50)
        world.check()
    bal = world.balance()
    overshoot = max(0, bal.settled - LIMIT)
    assert overshoot <= bal.overrun
    assert overshoot * 100 <= LIMIT  # <= 1% of the limit, one key maxing out included


def test_a_burst_with_an_adversarial_key_overshoots_at_most_one_percent() -> None:
    """Learn small outputs on every key, fill the budget at right-sized holds, then key k0 maxes out."""
    world = World()
    for i in range(40):
        world.arrive(KEYS[i % 4], 400)
        world.settle(0, 20)
    for i in range(2000):
        world.arrive(KEYS[i % 4], 400)
    assert any(h < INPUT_COST + 400 * PER_TOKEN for _, _, h in world.open.values())  # some holds right-sized
    world.adversarial = True
    while world.open:
        world.settle(0, 20)
        world.check()
    bal = world.balance()
    assert bal.overrun > 0  # the adversarial key did overrun its holds
    assert max(0, bal.settled - LIMIT) * 100 <= LIMIT
