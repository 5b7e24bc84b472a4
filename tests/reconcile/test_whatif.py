"""Budget what-if: the replay reproduces reality under the real budgets, and a small case checked by hand."""

from __future__ import annotations

import dataclasses
import random
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import orjson
import pytest

from ledger.admission import ScopeLimit
from ledger.refusals import RequestRefused
from reconcile.whatif import Proposal, WhatIfError, read_traffic, replay, window
from reconcile.whatif_report import CAP, scope_rows, to_json, to_table, totals, variant_rows
from tests.reconcile.whatif_traffic import UTC, Ask, Budgets, archive, run_gateway

KOLKATA = ZoneInfo("Asia/Kolkata")
INR = 1_000_000  # micro-units in one rupee


def proposal_of(budgets: Budgets) -> Proposal:
    return Proposal(timezone=budgets.timezone, per_request_cap_micro=budgets.cap, run_default=budgets.run_default,
                    scopes=budgets.scopes)


def busy_month(seed: int) -> tuple[list[Ask], Budgets]:
    """~900 requests from 28 Oct to 4 Dec over 4 teams in 2 business units, with tight budgets.

    Limits bite in both months (the Kolkata month turns at 18:30 UTC on the 30th), some holds
    expire, agent runs hit their call cap, some asks are over the per-request cap."""
    rng = random.Random(seed)
    teams = {"pay": "retail", "search": "retail", "kyc": "ops", "legal": "ops"}
    start = datetime(2026, 10, 28, tzinfo=UTC)
    span = (datetime(2026, 12, 4, tzinfo=UTC) - start).total_seconds()
    asks = []
    for i in range(900):
        at = start + timedelta(seconds=rng.uniform(0, span), microseconds=rng.randrange(1_000_000))
        team = rng.choice(sorted(teams))
        hold = rng.choice((2, 3, 5, 8, 40)) * INR // 10
        run = f"r{at:%m%d}-{rng.randrange(3)}" if at > datetime(2026, 11, 2, tzinfo=UTC) and rng.random() < 0.3 \
            else None
        asks.append(Ask(
            request_id=f"req-{i:04d}", at=at, key=f"{team}-{rng.randrange(3)}", team=team, bu=teams[team],
            hold=hold, cost=rng.randint(0, hold + hold // 4),  # now and then over the hold: an overrun
            settle_after=timedelta(seconds=rng.uniform(0.5, 3000)), run=run, expire=rng.random() < 0.03))
    budgets = Budgets(scopes={
        "team:pay": ScopeLimit(60 * INR), "team:kyc": ScopeLimit(45 * INR), "bu:retail": ScopeLimit(70 * INR),
        "key:legal-1": ScopeLimit(8 * INR), "key:search-2": ScopeLimit(12 * INR),
    }, run_default=ScopeLimit(3 * INR, max_calls=4), cap=35 * INR // 10)
    return asks, budgets


@pytest.mark.parametrize("partitions", [1, 3])
def test_the_real_budgets_reproduce_the_real_refusals_to_the_request(tmp_path, partitions):
    asks, budgets = busy_month(seed=11)
    events = run_gateway(asks, budgets)
    archive(tmp_path / "archive", events, partitions=partitions)
    start, end = window(datetime(2026, 11, 20, tzinfo=UTC), datetime(2026, 12, 3, tzinfo=UTC))
    proposal = proposal_of(budgets)

    result = replay(read_traffic(tmp_path / "archive", start, end, KOLKATA), proposal, start=start, end=end)

    real = {(e.request_id, e.error_code, e.scope) for e in events
            if isinstance(e, RequestRefused) and start <= e.time < end}
    codes = {code for _, code, _ in real}
    assert codes == {"budget_exhausted", "run_calls_exhausted", "request_cost_cap_exceeded"}  # every kind bites
    assert {scope.split(":")[0] for _, _, scope in real if scope} == {"key", "team", "bu", "run"}
    assert len(real) > 50
    assert {(o.request_id, o.proposed.code, o.proposed.scope) for o in result.refused("proposed")} == real
    assert result.newly_refused() == result.newly_admitted() == []
    t = totals(result)
    assert t.same_as_reality and t.difference_micro == 0 and t.spend_real_micro > 0
    assert t.attempts == sum(1 for a in asks if start <= a.at < end)
    assert all(r.difference_micro == 0 for r in scope_rows(result, every=True))


def test_the_window_starts_from_the_real_balances_of_its_month(tmp_path):
    """Without the month before --from (the warm-up), the same budgets would refuse less: the test has teeth."""
    asks, budgets = busy_month(seed=11)
    events = run_gateway(asks, budgets)
    start, end = window(datetime(2026, 11, 20, tzinfo=UTC), datetime(2026, 11, 25, tzinfo=UTC))
    cold = replay([e for e in events if e.time >= start], proposal_of(budgets), start=start, end=end)
    assert totals(cold).newly_admitted > 0


def test_a_looser_budget_admits_the_refused_at_their_hold_and_a_tighter_one_refuses_more(tmp_path):
    asks, budgets = busy_month(seed=3)
    events = run_gateway(asks, budgets)
    start, end = window(datetime(2026, 11, 5, tzinfo=UTC), datetime(2026, 11, 30, tzinfo=UTC))
    loose = replay(events, Proposal(), start=start, end=end)  # no budgets at all
    assert totals(loose).refused == 0
    worst = loose.newly_admitted()
    assert worst and all(o.cost("proposed") == o.hold_micro and o.worst_case for o in worst)
    assert len(worst) == totals(loose).really_refused
    tight = replay(events, Proposal(scopes={"bu:ops": ScopeLimit(10 * INR)}), start=start, end=end)
    refused_ops = [o for o in tight.newly_refused() if o.proposed.scope == "bu:ops"]
    assert refused_ops and all(o.team in ("kyc", "legal") for o in refused_ops)


# --- a what-if checked by hand ----------------------------------------------------------------------


def hand_case() -> tuple[list, Proposal]:
    """Team a (business unit x), keys k1 and k2. Really in force: key:k2 may spend ₹1.00 a month; nothing
    else is limited. Every request holds ₹3.00; r0 (2 Nov, before the window) really costs ₹1.00, the
    others ₹2.00 each. Really: r2 asks ₹3.00 of key:k2's ₹1.00: refused (budget_exhausted, key:k2);
    r1, r3, r4, r5 run.

    Proposed: team:a may spend ₹7.00 a month; no key limit.
    """
    nov10 = datetime(2026, 11, 10, 10, 0, tzinfo=UTC)
    minute = timedelta(minutes=1)

    def ask(rid: str, at: datetime, key: str, cost: int, settle_after: timedelta) -> Ask:
        return Ask(request_id=rid, at=at, key=key, team="a", bu="x", hold=3 * INR, cost=cost * INR,
                   settle_after=settle_after)

    asks = [
        ask("r0", datetime(2026, 11, 2, 9, 0, tzinfo=UTC), "k1", 1, minute),  # before the window: warm-up
        ask("r1", nov10, "k1", 2, 2 * minute),  # still held when r2 arrives; settles at 10:02
        ask("r2", nov10 + 1 * minute, "k2", 2, minute),  # really refused on key:k2
        ask("r3", nov10 + 3 * minute, "k1", 2, minute),
        ask("r4", nov10 + 5 * minute, "k1", 2, minute),
        ask("r5", nov10 + 7 * minute, "k1", 2, minute),
    ]
    real = Budgets(scopes={"key:k2": ScopeLimit(1 * INR)})
    return run_gateway(asks, real), Proposal(scopes={"team:a": ScopeLimit(7 * INR)})


def test_a_what_if_checked_by_hand():
    events, proposal = hand_case()
    start, end = window(datetime(2026, 11, 10, tzinfo=UTC), datetime(2026, 11, 10, tzinfo=UTC))
    result = replay(events, proposal, start=start, end=end)
    # Under team:a ₹7.00 (November in Kolkata), spent = settled + held:
    #   warm-up r0 settled ₹1.00                                  spent 1
    #   r1 10:00 available 7 - 1 = 6 >= 3: admitted, holds 3      spent 4
    #   r2 10:01 available 7 - 4 = 3 >= 3: admitted; really refused, so no settlement to replay:
    #            charged its full hold 3 at once (worst case)    spent 7
    #   r1 settles 10:02 at its real cost 2 (hold 3 released)     spent 1 + 2 + 3 = 6
    #   r3 10:03 available 7 - 6 = 1 < 3: refused (team:a)
    #   r4 10:05, r5 10:07: available still 1: refused (team:a)
    by_id = {o.request_id: o for o in result.outcomes}
    assert [o.request_id for o in result.outcomes] == ["r1", "r2", "r3", "r4", "r5"]
    assert by_id["r1"].proposed.admitted and by_id["r2"].worst_case
    assert [(o.request_id, o.proposed.code, o.proposed.scope) for o in result.refused("proposed")] == [
        ("r3", "budget_exhausted", "team:a"), ("r4", "budget_exhausted", "team:a"),
        ("r5", "budget_exhausted", "team:a")]
    assert [(o.request_id, o.real.scope) for o in result.refused("real")] == [("r2", "key:k2")]
    # Spend in the window. Real: r1 + r3 + r4 + r5 = 4 x 2 = 8.00. Proposed: r1 2 + r2 3 (worst case) = 5.00.
    t = totals(result)
    assert (t.attempts, t.really_refused, t.refused, t.newly_refused, t.newly_admitted) == (5, 1, 3, 3, 1)
    assert (t.spend_real_micro, t.spend_proposed_micro, t.difference_micro) == (8 * INR, 5 * INR, -3 * INR)
    # Per scope (real -> proposed):
    #   bu:x    8 -> 5 (-3); key:k1: r1 r3 r4 r5 = 8 -> r1 = 2 (-6); key:k2: 0 -> r2's hold 3 (+3);
    #   team:a  8 -> 5 (-3), refused 3 from r3 at 10:03, all 3 newly refused.
    rows = {r.scope: r for r in scope_rows(result, every=True)}
    assert set(rows) == {"bu:x", "key:k1", "key:k2", "team:a"}
    assert [r.scope for r in scope_rows(result)] == ["bu:x", "key:k2", "team:a"]  # keys only when they refuse
    assert {s: (r.spend_real_micro // INR, r.spend_proposed_micro // INR, r.difference_micro // INR)
            for s, r in rows.items()} == {"bu:x": (8, 5, -3), "key:k1": (8, 2, -6), "key:k2": (0, 3, 3),
                                          "team:a": (8, 5, -3)}
    team = rows["team:a"]
    assert (team.refused, team.newly_refused, team.really_refused, team.refused_from) == (
        3, 3, 0, datetime(2026, 11, 10, 10, 3, tzinfo=UTC))
    k2 = rows["key:k2"]
    assert (k2.refused, k2.really_refused, k2.newly_admitted) == (0, 1, 1)

    doc = orjson.loads(to_json(result, "INR"))
    assert doc["totals"]["difference_micro"] == -3_000_000 and doc["totals"]["newly_admitted_worst_case"] == 1
    assert [c["request_id"] for c in doc["changes"]] == ["r2", "r3", "r4", "r5"]
    assert doc["changes"][0]["worst_case"] is True and doc["changes"][0]["cost_proposed_micro"] == 3_000_000
    table = to_table(result, "INR")
    assert "team:a" in table and "2026-11-10T10:03:00Z" in table and "-3.000000" in table
    assert "worst case" in table


def test_the_per_request_cap_is_part_of_the_proposal():
    events, _ = hand_case()
    start, end = window(datetime(2026, 11, 10, tzinfo=UTC), datetime(2026, 11, 10, tzinfo=UTC))
    result = replay(events, Proposal(per_request_cap_micro=2 * INR), start=start, end=end)  # every hold is 3.00
    assert {(o.proposed.code, o.proposed.scope) for o in result.outcomes} == {("request_cost_cap_exceeded", None)}
    assert [r.scope for r in scope_rows(result) if r.refused] == [CAP]


def test_an_empty_range_and_reversed_dates_are_clear_errors(tmp_path):
    events, _ = hand_case()
    archive(tmp_path / "archive", events)
    start, end = window(datetime(2026, 12, 1, tzinfo=UTC), datetime(2026, 12, 2, tzinfo=UTC))
    with pytest.raises(WhatIfError, match="no archive for 2026-12-01..2026-12-02"):
        read_traffic(tmp_path / "archive", start, end, KOLKATA)
    with pytest.raises(WhatIfError, match="--to 2026-11-01 is before --from 2026-11-10"):
        window(datetime(2026, 11, 10, tzinfo=UTC), datetime(2026, 11, 1, tzinfo=UTC))


def test_a_split_is_seen_per_variant_side_by_side():
    """The hand case with r1, r3 served by a split's current variant and r2, r4, r5 by its candidate."""
    events, proposal = hand_case()
    variant = {"r1": "current", "r3": "current", "r2": "candidate", "r4": "candidate", "r5": "candidate"}
    events = [dataclasses.replace(e, tags={**e.tags, "fb.variant": variant[e.request_id]})
              if hasattr(e, "tags") and e.request_id in variant else e for e in events]
    start, end = window(datetime(2026, 11, 10, tzinfo=UTC), datetime(2026, 11, 10, tzinfo=UTC))
    result = replay(events, proposal, start=start, end=end)
    rows = {v.variant: v for v in variant_rows(result)}
    # current: r1 (2.00, admitted both ways), r3 (2.00 really, refused under the proposal)
    # candidate: r2 (really refused; admitted under the proposal at its hold 3.00), r4 and r5 (2.00 each really,
    # refused under the proposal)
    assert [(v.attempts, v.refused, v.really_refused, v.spend_real_micro // INR, v.spend_proposed_micro // INR)
            for v in (rows["current"], rows["candidate"])] == [(2, 1, 0, 4, 2), (3, 2, 1, 4, 3)]
    doc = orjson.loads(to_json(result, "INR"))
    assert [v["variant"] for v in doc["variants"]] == ["candidate", "current"]
    assert "split variant candidate: 3 attempts, refused 2 under the proposal (1 really)" in to_table(result, "INR")
