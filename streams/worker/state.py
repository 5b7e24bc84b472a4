"""What the worker's agents and timers share: its settings, its Faust handles, and its in-memory state.

``WorkerConfig`` is the worker's settings (built by ``farebox.worker``);
``Worker`` the app and its topics, tables and Redis projections;
``WorkerState`` the in-memory mirrors every agent module receives explicitly.

Invariants of ``WorkerState`` (kept by the agents, restored by
``streams.worker.rebalance.forget`` after partitions move):

* ``live`` holds decoded scope states of this worker's partitions; a scope's
  entry is never older than its ``scope_ledger`` table value;
* ``open_requests`` mirrors the open states of the ``requests`` table, and
  ``closed`` its closed ones per ``fb.requests`` partition (for retention);
* ``dirty`` names the scopes whose Redis projection is behind the table;
* ``batchers`` are the agents' batchers by name (``split``, ``scope``,
  ``rollups``), paused together on a rebalance.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import faust

from ledger.leases import LeasePolicy, ScopeLedger
from ledger.retention import DEFAULT_RETENTION_S, ClosedRequests
from streams.batching import Batcher
from streams.projections import RedisProjections


@dataclass(frozen=True)
class WorkerConfig:
    bootstrap: str
    redis_url: str
    tz: ZoneInfo
    limit_for: Callable[[str], int | None]  # a scope's hard limit now (None: unlimited)
    soft_pct_for: Callable[[str], int] = lambda scope: 80
    currency_for: Callable[[], str] = lambda: "INR"  # the budget currency (of the notices)
    app_id: str = "farebox-worker"
    requests_topic: str = "fb.requests"
    scope_topic: str = "fb.scope-entries"
    rollups_topic: str = "fb.rollups"
    dead_letter_topic: str = "fb.dead-letter"
    partitions: int = 3
    policy: LeasePolicy = field(default_factory=LeasePolicy)
    data_dir: Path = Path("var/worker")
    sweep_interval_s: float = 1.0
    projection_interval_s: float = 0.1
    request_retention_s: float = DEFAULT_RETENTION_S  # closed request states are forgotten after it
    prune_batch: int = 100  # at most this many forgotten per batch: no pause when a minute's worth falls due
    # Agents flush their writes every batch_max events, or within their window after a batch's first
    # event (streams.batching): the scope ledger's is short (its table writes; grants go at once), the
    # splitter's longer (a request's events then often share a batch: its state is written once).
    batch_max: int = 4000
    scope_within_s: float = 0.005
    split_within_s: float = 0.1
    rollup_within_s: float = 0.5
    # a table recovery that reads nothing for this long ends the worker, for its supervisor to restart it
    # (streams.watchdog; 0: never)
    stall_s: float = 60.0


@dataclass
class Worker:
    """The app and its handles: topics, tables (in-memory stores recovered from their changelogs) and Redis."""

    cfg: WorkerConfig
    app: faust.App
    requests: faust.TopicT
    entries: faust.TopicT
    rollups: faust.TopicT
    request_states: faust.Table  # request id -> open/closed state (streams.worker.split)
    scope_ledger: faust.Table  # scope -> ScopeLedger.to_dict() (streams.worker.ledger)
    rollup_table: faust.Table  # rollup key -> running total (streams.worker.rollups)
    projections: RedisProjections


@dataclass
class WorkerStats:
    """Counters for logs and debugging; nothing decides on them."""

    requests: int = 0
    entries: int = 0
    grants: int = 0
    notices: int = 0
    stale: int = 0
    forgotten: int = 0
    dead_letters: int = 0
    started: float = field(default_factory=time.monotonic)


@dataclass
class WorkerState:
    """The in-memory state the agents and timers share (see the module docstring for its invariants)."""

    live: dict[str, ScopeLedger] = field(default_factory=dict)
    open_requests: dict[str, dict[str, Any]] = field(default_factory=dict)
    closed: dict[str, ClosedRequests] = field(default_factory=dict)  # fb.requests partition -> its index
    dirty: set[str] = field(default_factory=set)
    batchers: dict[str, Batcher] = field(default_factory=dict)
    stats: WorkerStats = field(default_factory=WorkerStats)

    def scope_state(self, scope: str, table: Mapping[str, Any]) -> ScopeLedger:
        """The scope's live state, decoded from ``table`` (the ``scope_ledger`` table) the first time."""
        state = self.live.get(scope)
        if state is None:
            stored = table.get(scope)
            state = self.live[scope] = ScopeLedger.from_dict(stored) if stored else ScopeLedger(scope)
        return state
