"""Real-looking request streams for the what-if tests, made by the pure admission the gateway runs.

``Gateway`` replays a list of ``Ask``s in time order the way the embedded
gateway admits them: the per-request cap, then ``ledger.admission.decide_admit``
against a real ``Ledger`` under the budgets really in force; an admitted
request emits ``request.admitted`` and an attempt, then later settles (or its
hold expires, the pod having died); a refused one emits ``request.refused``
(what the gateway must emit at its refusal point). Every event is folded into
the real ledger as it is emitted, so the stream is what really happened.
``archive`` writes it with ``streams.archive.write.ArchiveWriter``, partitioned by
team as Kafka would, or all on partition 0 as the embedded log is.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

from ledger.admission import ScopeLimit, decide_admit, exceeds_cost_cap
from ledger.balances import Ledger
from ledger.codec import encode
from ledger.events import Event, HoldExpired, RequestAdmitted, RequestAttempted, RequestSettled
from ledger.periods import period_of
from ledger.refusals import RequestRefused
from ledger.usage import TokenUsage
from streams.archive.write import ArchiveWriter, Record

UTC = timezone.utc
CCY = "INR"


@dataclass(frozen=True)
class Ask:
    """One request: who, when, the hold it asks, what it will really cost, and when it closes.

    ``expire``: the pod dies and the hold expires after ``ttl_s`` instead of settling."""

    request_id: str
    at: datetime
    key: str
    team: str
    bu: str
    hold: int
    cost: int
    settle_after: timedelta = timedelta(seconds=2)
    run: str | None = None
    expire: bool = False
    ttl_s: int = 600

    @property
    def scopes(self) -> list[str]:
        scopes = [f"key:{self.key}", f"team:{self.team}", f"bu:{self.bu}"]
        return scopes + [f"run:{self.run}"] if self.run else scopes


@dataclass(frozen=True)
class Budgets:
    """The budgets really in force: per-scope limits, the run default and the per-request cap."""

    scopes: Mapping[str, ScopeLimit]
    run_default: ScopeLimit = ScopeLimit(None)
    cap: int | None = None
    timezone: str = "Asia/Kolkata"

    def limit_for(self, scope: str) -> ScopeLimit | None:
        limit = self.scopes.get(scope) or (self.run_default if scope.startswith("run:") else None)
        return limit if limit is not None and (limit.limit_micro is not None or limit.max_calls is not None) else None


def run_gateway(asks: list[Ask], budgets: Budgets) -> list[Event]:
    """The events of ``asks`` under ``budgets``, in log order (settlements interleaved by time)."""
    ledger = Ledger(ZoneInfo(budgets.timezone))
    log: list[Event] = []
    due: list[tuple[datetime, int, Event]] = []  # closes waiting for their time
    seq = 0

    def emit(event: Event) -> None:
        ledger.apply(event)
        log.append(event)

    for ask in sorted(asks, key=lambda a: a.at):
        while due and due[0][0] <= ask.at:
            emit(heapq.heappop(due)[2])
        holds = {scope: ask.hold for scope in ask.scopes}
        common = dict(time=ask.at, request_id=ask.request_id, team=ask.team, key_id=ask.key,
                      business_unit=ask.bu, app="app", run_id=ask.run, alias="chat-default",
                      est_input_tokens=100, max_output_tokens=200, holds=holds, currency=CCY, price_version=1,
                      pod="pod-a")
        if exceeds_cost_cap(ask.hold, budgets.cap):
            emit(RequestRefused(**common, error_code="request_cost_cap_exceeded", scope=None))
            continue
        limits = {s: lim for s in ask.scopes if (lim := budgets.limit_for(s)) is not None}
        decision = decide_admit(ledger, scopes=ask.scopes, amount_micro=ask.hold, limits=limits,
                                period=period_of(ask.at, ledger.tz))
        if not decision.ok:
            emit(RequestRefused(**common, error_code=decision.reason, scope=decision.short_scope))
            continue
        emit(RequestAdmitted(**common, data_class="internal", hold_ttl_s=ask.ttl_s, stream=False))
        emit(RequestAttempted(
            time=ask.at + timedelta(milliseconds=5), request_id=ask.request_id, team=ask.team, attempt=1,
            deployment="sim", provider="sim", account="acct", model="m", region="r", outcome="ok", status=200,
            ttft_ms=10, latency_ms=20, usage=TokenUsage(input=100, output=50), cost_micro=ask.cost,
            currency=CCY, price_version=1, error_code=None))
        if ask.expire:
            close: Event = HoldExpired(time=ask.at + timedelta(seconds=ask.ttl_s), request_id=ask.request_id,
                                       team=ask.team, charged=holds, currency=CCY)
        else:
            close = RequestSettled(
                time=ask.at + ask.settle_after, request_id=ask.request_id, team=ask.team, final_status=200,
                attempts=1, deployment="sim", usage=TokenUsage(input=100, output=50), cost_micro=ask.cost,
                currency=CCY, cost_by_scope={s: ask.cost for s in holds},
                hold_released=holds, overrun_micro=max(ask.cost - ask.hold, 0), cache_hit=False, latency_ms=20)
        seq += 1
        heapq.heappush(due, (close.time, seq, close))
    while due:
        emit(heapq.heappop(due)[2])
    return log


def archive(root: Path, events: list[Event], *, partitions: int = 1, batch: int = 50) -> Path:
    """Write ``events`` (log order) to an archive: by team over ``partitions``, in batches, like the archiver."""
    writer = ArchiveWriter(root, "log")
    stored = datetime(2026, 12, 31, tzinfo=UTC)
    parts: dict[int, list[Event]] = {}
    for event in events:
        parts.setdefault(sum(map(ord, event.key or "")) % partitions, []).append(event)
    for partition, stream in parts.items():
        for first in range(0, len(stream), batch):
            chunk = stream[first:first + batch]
            writer.write([Record(partition, first + n, encode(e)) for n, e in enumerate(chunk)], now=stored)
    return root
