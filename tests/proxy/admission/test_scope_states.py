"""ScopeStates: the pod's reading of the worker's projection (hard, past soft, downgrade), and when not to trust it."""

from __future__ import annotations

from pricing.book import FxTable, PriceBook
from proxy.admission.scope_states import ScopeStates, parse_row
from proxy.snapshot import BudgetLimit, BudgetPolicy, Snapshot

ROW = {"period": "2026-11", "state": "ok", "settled": "700000", "held": "50000", "leased": "200000",
       "limit": "1000000", "overrun": "0", "requests": "12"}


def snapshot(**limits: BudgetLimit) -> Snapshot:
    return Snapshot(version=1, content_hash="h", keys={}, aliases={}, deployments={}, teams={},
                    price_book=PriceBook(), fx=FxTable(),
                    budgets=BudgetPolicy(scopes={k.replace("_", ":"): v for k, v in limits.items()}))


def test_soft_counts_settled_and_held_not_leased_and_names_the_downgrade():
    states = ScopeStates(fresh_s=2.0)
    states.update({"team:a": ROW}, read_at=100.0)
    snap = snapshot(team_a=BudgetLimit(1_000_000, soft_pct=75, downgrade_alias="chat-mini"))
    assert states.any_past_soft(snap, ["team:a"], "2026-11", now=101.0)  # 750,000 >= 75 %
    assert states.downgrade_for(snap, ["key:k", "team:a"], "2026-11", now=101.0) == "chat-mini"
    strict = snapshot(team_a=BudgetLimit(1_000_000, soft_pct=80, downgrade_alias="chat-mini"))
    assert not states.any_past_soft(strict, ["team:a"], "2026-11", now=101.0)  # the 200,000 leased is not spent
    assert states.downgrade_for(strict, ["team:a"], "2026-11", now=101.0) is None


def test_hard_is_trusted_only_fresh_and_in_the_same_period():
    states = ScopeStates(fresh_s=2.0)
    states.update({"team:a": {**ROW, "state": "hard"}}, read_at=100.0)
    assert states.hard("team:a", "2026-11", now=101.0)
    assert not states.hard("team:a", "2026-11", now=102.5)  # stale: Redis may be away
    assert not states.hard("team:a", "2026-12", now=101.0)  # the month turned
    assert not states.hard("team:b", "2026-11", now=101.0)  # never read


def test_watched_scopes_are_read_until_idle_and_bad_rows_are_ignored():
    states = ScopeStates(idle_s=60)
    states.watch(["team:a", "key:k"], now=0.0)
    states.watch(["team:a"], now=50.0)
    assert sorted(states.wanted(now=70.0)) == ["team:a"]  # key:k idle for 70 s: dropped
    states.update({"team:a": {}, "key:k": {**ROW, "settled": "x"}}, read_at=70.0)
    assert states.views == {}
    assert parse_row({**ROW, "limit": ""}, 1.0).limit is None  # type: ignore[union-attr]
