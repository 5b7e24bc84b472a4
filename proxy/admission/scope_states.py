"""What the ledger processor last said about each budget scope, as one pod sees it (distributed mode).

The worker projects every scope's balances into Redis (``streams.projections``:
``period``, ``settled``, ``held``, ``leased``, ``limit``, ``state`` ok | soft |
hard). A pod polls the hashes of the scopes its requests touch (``watch``) a
few times a second and keeps them here, so admission answers from memory:

* ``hard``: the scope is fully committed this period (settled + held + leased
  >= limit). A request this pod's leases do not cover is refused at once with
  429 ``budget_exhausted`` instead of waiting on a lease round trip that the
  processor would refuse anyway.
* ``past_soft``: settled + held at or above the scope's ``soft_pct``, for the
  ``x-fb-budget-state: soft`` header and ``downgrade_alias`` as in embedded
  mode (leased money is not spent yet, so it does not count here).

A reading older than ``fresh_s`` (Redis unreachable) or of another period (the
month turned and the worker has not re-projected the scope yet) is ignored:
the pod then asks the processor as usual, so a stale "hard" never locks a
scope out. Pure: rows and clock readings come in; no I/O here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from proxy.snapshot import BudgetLimit, Snapshot


@dataclass(frozen=True, slots=True)
class ScopeView:
    period: str
    state: str  # ok | soft | hard
    settled: int
    held: int
    leased: int
    limit: int | None
    read_at: float  # the poller's clock (monotonic seconds)


def parse_row(row: dict[str, str], read_at: float) -> ScopeView | None:
    """A projection hash as the poller read it; None when it is empty or malformed."""
    try:
        return ScopeView(row["period"], row["state"], int(row["settled"]), int(row["held"]), int(row["leased"]),
                         int(row["limit"]) if row.get("limit") else None, read_at)
    except (KeyError, ValueError):
        return None


class ScopeStates:
    def __init__(self, fresh_s: float = 2.0, idle_s: float = 600.0) -> None:
        self.fresh_s = fresh_s
        self.idle_s = idle_s
        self.views: dict[str, ScopeView] = {}
        self.watched: dict[str, float] = {}  # scope -> last time a request touched it

    def watch(self, scopes: Iterable[str], now: float) -> None:
        for scope in scopes:
            self.watched[scope] = now

    def wanted(self, now: float) -> list[str]:
        """The scopes to read next; those no request touched for ``idle_s`` are forgotten."""
        for scope in [s for s, at in self.watched.items() if now - at > self.idle_s]:
            del self.watched[scope]
            self.views.pop(scope, None)
        return list(self.watched)

    def update(self, rows: dict[str, dict[str, str]], read_at: float) -> None:
        for scope, row in rows.items():
            view = parse_row(row, read_at)
            if view is not None:
                self.views[scope] = view

    def view(self, scope: str, period: str, now: float) -> ScopeView | None:
        view = self.views.get(scope)
        if view is None or view.period != period or now - view.read_at > self.fresh_s:
            return None
        return view

    def hard(self, scope: str, period: str, now: float) -> bool:
        view = self.view(scope, period, now)
        return view is not None and view.state == "hard"

    def past_soft(self, scope: str, limit: BudgetLimit | None, period: str, now: float) -> bool:
        view = self.view(scope, period, now)
        if view is None or limit is None or limit.limit_micro is None:
            return False
        return (view.settled + view.held) * 100 >= limit.limit_micro * limit.soft_pct

    def any_past_soft(self, snapshot: Snapshot, scopes: Iterable[str], period: str, now: float) -> bool:
        return any(self.past_soft(s, snapshot.budgets.limit_for(s), period, now) for s in scopes)

    def downgrade_for(self, snapshot: Snapshot, scopes: list[str], period: str, now: float) -> str | None:
        """The cheaper alias to serve instead, once a scope past its soft threshold asks for one."""
        for scope in scopes:
            limit = snapshot.budgets.limit_for(scope)
            if limit and limit.downgrade_alias and self.past_soft(scope, limit, period, now):
                return limit.downgrade_alias
        return None
