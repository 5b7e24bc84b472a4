"""The worker's jobs over ``WorkerState``, in process with stand-ins for Faust and Redis.

``rebalance.forget`` rebuilds the shared state from the recovered tables for this worker's partitions only;
``projections.project_once`` writes the dirty scopes and keeps them dirty while Redis is away. The broker
tests (``test_worker.py``, ``tests/distributed``) hold the agents end to end.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from types import SimpleNamespace
from zoneinfo import ZoneInfo

from aiokafka import TopicPartition

from ledger.leases import ScopeLedger
from ledger.periods import period_of
from streams.table_writes import key_partition
from streams.worker import projections, rebalance
from streams.worker.state import WorkerConfig, WorkerState

TZ = ZoneInfo("Asia/Kolkata")
CFG = WorkerConfig(bootstrap="-", redis_url="-", tz=TZ, limit_for=lambda scope: 1_000_000, partitions=3)
AT = "2026-11-30T10:00:00.000000Z"


class _Batcher:
    def __init__(self) -> None:
        self.dropped = self.holes = self.rewinds = 0
        self.kept: object = None
        self.resumed = False

    def keep(self, assigned: object) -> None:
        self.kept = assigned

    def resume(self) -> None:
        self.resumed = True


def _worker(assigned: set, request_states: dict, scope_ledger: dict,
            projections_port: object = None) -> SimpleNamespace:
    consumer = SimpleNamespace(assignment=lambda: assigned, topic_partitions=lambda topic: 3)
    return SimpleNamespace(cfg=CFG, app=SimpleNamespace(consumer=consumer), request_states=request_states,
                           scope_ledger=scope_ledger, projections=projections_port)


def test_forget_rebuilds_the_shared_state_for_owned_partitions_only():
    assigned = {TopicPartition(CFG.requests_topic, 0), TopicPartition(CFG.scope_topic, 1)}
    requests = {"mine-open": {"s": "open", "at": AT, "src": "0"}, "theirs-open": {"s": "open", "at": AT, "src": "2"},
                "mine-closed": {"s": "closed", "at": AT, "src": "0"}}
    scopes = [f"team:t{i}" for i in range(12)]
    w = _worker(assigned, requests, {scope: ScopeLedger(scope).to_dict() for scope in scopes})
    state = WorkerState(live={"team:stale": ScopeLedger("team:stale")}, open_requests={"gone": {}})
    batcher = state.batchers["split"] = _Batcher()  # type: ignore[assignment]

    rebalance.forget(w, state)  # type: ignore[arg-type]

    assert state.live == {}  # decoded again from the recovered table on first use
    assert set(state.open_requests) == {"mine-open"}
    assert set(state.closed) == {"0"} and len(state.closed["0"]) == 1
    mine = {scope for scope in scopes if key_partition(scope, 3) == 1}
    assert mine and state.dirty == mine  # only this worker's scopes are projected
    assert batcher.kept == assigned and batcher.resumed


class _Redis:
    def __init__(self, fail: bool) -> None:
        self.fail = fail
        self.written: dict = {}

    async def scopes(self, rows: dict) -> None:
        if self.fail:
            raise ConnectionError("redis away")
        self.written.update(rows)


def test_project_once_writes_dirty_scopes_and_keeps_them_dirty_while_redis_is_away():
    now = datetime(2026, 11, 30, 10, tzinfo=timezone.utc)
    redis = _Redis(fail=True)
    w = _worker(set(), {}, {}, redis)
    state = WorkerState(dirty={"team:a", "team:b"})
    state.scope_state("team:a", w.scope_ledger).totals(period_of(now, TZ)).settled = 250

    asyncio.run(projections.project_once(w, state, now))  # type: ignore[arg-type]
    assert redis.written == {} and state.dirty == {"team:a", "team:b"}

    redis.fail = False
    asyncio.run(projections.project_once(w, state, now))  # type: ignore[arg-type]
    assert state.dirty == set()
    assert redis.written["team:a"]["settled"] == 250 and redis.written["team:a"]["limit"] == 1_000_000
    assert redis.written["team:b"]["settled"] == 0 and redis.written["team:b"]["state"] == "ok"
