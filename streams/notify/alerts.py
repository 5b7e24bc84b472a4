"""Which events are worth telling a person about, and the alert each becomes. Pure: no clock, no I/O.

An ``Alert`` has a deterministic ``id``; the dispatcher sends each id once.
What an id names, so that the same situation is told once:

* ``budget.soft_threshold``: the ``budget.threshold_crossed`` event's id (once per scope and period);
* ``budget.hard_limit``: ``hard_limit/{scope}/{YYYY-MM}``; the first ``budget_exhausted`` refusal
  of a scope in a month, however many follow;
* ``key.near_expiry``: ``key_expiry/{key_id}/{expires_at}``; a key's expiry, once (a renewed key's
  new expiry is a new alert);
* ``cost.anomaly``: ``cost_anomaly/{minute}``; a minute whose settled cost exceeds ``factor`` times
  the mean of the minutes before it (``CostAnomaly``);
* ``reconcile.drift``: the ``reconcile.reported`` event's id, when rows were flagged.

Alerts carry scopes, teams, key ids and amounts; never a key's value, a
prompt or a provider secret.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from ledger.events import BudgetThresholdCrossed, ConfigRollout, Event, RequestSettled
from ledger.reconcile_events import ReconcileReported
from ledger.refusals import RequestRefused


@dataclass(frozen=True, slots=True)
class Alert:
    id: str
    kind: str  # budget.soft_threshold | budget.hard_limit | key.near_expiry | cost.anomaly | reconcile.drift |
    # config.rollback
    severity: str  # warning | critical
    summary: str
    time: datetime
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "severity": self.severity, "summary": self.summary,
                "time": self.time.isoformat(), "details": self.details}


def _money(micro: int, currency: str) -> str:
    return f"{micro / 1_000_000:.2f} {currency}"  # display only; the integer is in details


def alert_of(event: Event) -> Alert | None:
    """The alert one event raises by itself, if any (cost anomalies need ``CostAnomaly``)."""
    if isinstance(event, BudgetThresholdCrossed):
        pct = event.spent_micro * 100 // event.limit_micro if event.limit_micro else 100
        return Alert(event.id, "budget.soft_threshold", "warning",
                     f"{event.scope} crossed its {event.threshold_pct}% soft threshold for {event.period}: "
                     f"{_money(event.spent_micro, event.currency)} of {_money(event.limit_micro, event.currency)} "
                     f"({pct}%)", event.time,
                     {"scope": event.scope, "period": event.period, "spent_micro": event.spent_micro,
                      "limit_micro": event.limit_micro, "threshold_pct": event.threshold_pct,
                      "currency": event.currency})
    if isinstance(event, RequestRefused) and event.error_code == "budget_exhausted" and event.scope:
        period = event.time.astimezone(timezone.utc).strftime("%Y-%m")
        return Alert(f"hard_limit/{event.scope}/{period}", "budget.hard_limit", "critical",
                     f"{event.scope} reached its hard budget limit: requests are refused (429 budget_exhausted)",
                     event.time, {"scope": event.scope, "period": period, "team": event.team, "app": event.app,
                                  "first_refused_request": event.request_id})
    if isinstance(event, ReconcileReported) and event.flagged:
        return Alert(event.id, "reconcile.drift", "warning",
                     f"Reconciliation of {event.day}: {event.flagged} of {event.rows} rows differ from the "
                     f"providers' usage by over {event.threshold_percent}% ({event.accounts})", event.time,
                     {"day": event.day, "accounts": event.accounts, "rows": event.rows, "flagged": event.flagged,
                      "threshold_percent": event.threshold_percent, "content_hash": event.content_hash})
    if isinstance(event, ConfigRollout) and event.action == "rollback":
        return Alert(event.id, "config.rollback", "critical",
                     f"Config rollout {event.rollout_id} was rolled back: {event.reason}", event.time,
                     {"rollout_id": event.rollout_id, "version": event.version, "reason": event.reason})
    return None


@dataclass(frozen=True, slots=True)
class ExpiringKey:
    key_id: str  # the display id, never the key
    team: str
    app: str
    expires_at: float  # unix seconds UTC


def keys_near_expiry(keys: Iterable[ExpiringKey], now: datetime, within: timedelta) -> list[Alert]:
    """Keys expiring within ``within`` of ``now`` (and not yet expired): one alert each, to their owners."""
    out = []
    for key in keys:
        at = datetime.fromtimestamp(key.expires_at, timezone.utc)
        if now <= at <= now + within:
            days = (at - now).total_seconds() / 86_400
            out.append(Alert(f"key_expiry/{key.key_id}/{int(key.expires_at)}", "key.near_expiry", "warning",
                             f"Key {key.key_id} of {key.team}/{key.app} expires {at.isoformat()} "
                             f"(in {days:.1f} days): rotate it", now,
                             {"key_id": key.key_id, "team": key.team, "app": key.app,
                              "expires_at": at.isoformat()}))
    return out


class CostAnomaly:
    """Settled cost per minute (by event time); a closed minute over ``factor`` x the trailing mean is an alert.

    The baseline is the mean over up to ``window`` minutes before, empty minutes counting as zero, and needs
    ``warmup`` minutes of history; a minute is judged once the first event of a later minute arrives.
    """

    def __init__(self, factor: int = 3, min_micro: int = 1_000_000, window: int = 60, warmup: int = 5) -> None:
        self.factor, self.min_micro, self.window, self.warmup = factor, min_micro, window, warmup
        self.minute: int | None = None  # the open minute (unix minutes)
        self.total = 0
        self.currency = ""
        self.history: deque[tuple[int, int]] = deque()  # (minute, total) of closed minutes with spend
        self.first: int | None = None

    def observe(self, event: Event) -> Alert | None:
        if not isinstance(event, RequestSettled):
            return None
        minute = int(event.time.timestamp() // 60)
        self.currency = event.currency
        if self.first is None:
            self.first = minute
        alert = None
        if self.minute is not None and minute > self.minute:
            alert = self._close()
        if self.minute is None or minute > self.minute:
            self.minute, self.total = minute, 0
        if minute == self.minute:  # a settlement of a minute already judged arrived late: not counted again
            self.total += event.cost_micro
        return alert

    def _close(self) -> Alert | None:
        assert self.minute is not None and self.first is not None
        minute, total = self.minute, self.total
        while self.history and self.history[0][0] < minute - self.window:
            self.history.popleft()
        span = min(minute - self.first, self.window)
        alert = None
        if span >= self.warmup:
            mean = sum(t for _, t in self.history) / span
            if total >= self.min_micro and total > self.factor * mean:
                at = datetime.fromtimestamp(minute * 60, timezone.utc)
                alert = Alert(f"cost_anomaly/{at.strftime('%Y-%m-%dT%H:%M')}", "cost.anomaly", "warning",
                              f"Spend in the minute from {at.strftime('%H:%M')} UTC was "
                              f"{_money(total, self.currency)}, over {self.factor}x the trailing mean "
                              f"({_money(int(mean), self.currency)})", at,
                              {"minute": at.isoformat(), "cost_micro": total, "mean_micro": int(mean),
                               "factor": self.factor, "currency": self.currency})
        if total:
            self.history.append((minute, total))
        return alert
