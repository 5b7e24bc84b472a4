"""Budget what-if: archived admission attempts replayed through the pure admission and ledger fold.

``replay`` is pure. It takes the request events in log order and a
``Proposal`` (budgets as values) and, for every admission attempt in the
window (a ``request.admitted`` or a ``request.refused``), decides admit or
refuse with ``ledger.admission.decide_admit`` against a ``Ledger`` folded from
the replay's own decisions:

* an attempt admitted under the proposal and really admitted holds what it
  really held and is closed by its real settlement (or expiry) where that
  comes in the log;
* an attempt admitted under the proposal but really refused has no
  settlement to replay: its actual cost is unknown, so it is charged its full
  hold at once (the worst case) and the report marks it ``worst_case``;
* an attempt refused under the proposal holds nothing; its real settlement,
  if any, is ignored by the fold (the ledger never opened its hold).

Before the window, events are folded as they really happened from the start
of the window's budget month (``warmup_start``), so the balances the window
starts from are the real ones; the proposal takes effect at the window's start.
With the budgets really in force the replay therefore makes the decisions the
gateway made, to the request (embedded mode's exact ledger; a ``run:`` scope
whose run began before the month is seen only from the month's start).

Rate limits are not replayed: their refusals are not archived, and a proposal
changes budgets only, so a request the limits refused stays refused.

Money is integer micro-units of the budget currency throughout.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal
from zoneinfo import ZoneInfo

import pyarrow as pa
import pyarrow.compute as pc

from ledger.admission import ScopeLimit, decide_admit, exceeds_cost_cap
from ledger.balances import Ledger
from ledger.codec import decode
from ledger.errors import CodecError
from ledger.events import Event, HoldExpired, RequestAdmitted, RequestSettled
from ledger.periods import period_of
from ledger.refusals import RequestRefused
from ledger.request_events import VARIANT_TAG
from reconcile.errors import ReconcileError
from streams.archive.read import ArchiveError, archive_files, read_archive

Attempt = RequestAdmitted | RequestRefused




class WhatIfError(ReconcileError):
    """A what-if that cannot be run (bad dates, no archive for the range); the message says why."""


@dataclass(frozen=True, slots=True)
class Proposal:
    """Budgets as values: the shape of the config's ``budgets`` section, parsed (money in micro-units)."""

    timezone: str = "Asia/Kolkata"
    per_request_cap_micro: int | None = None
    run_default: ScopeLimit = ScopeLimit(None)
    scopes: Mapping[str, ScopeLimit] = field(default_factory=dict)

    def limits(self, scopes: Iterable[str]) -> dict[str, ScopeLimit]:
        """The limits that bind these scopes (as the gateway's admission picks them)."""
        out = {}
        for scope in scopes:
            limit = self.scopes.get(scope) or (self.run_default if scope.startswith("run:") else None)
            if limit is not None and (limit.limit_micro is not None or limit.max_calls is not None):
                out[scope] = limit
        return out


@dataclass(frozen=True, slots=True)
class Verdict:
    """An admission outcome: admitted, or refused with its code and short scope (None for the cap)."""

    admitted: bool
    code: str | None = None
    scope: str | None = None


ADMITTED = Verdict(True)


@dataclass(slots=True)
class Outcome:
    """One admission attempt in the window: what really happened and what the proposal decides.

    ``real_charges`` is what the request really cost per scope (settled or expired; its hold while it
    was still open at the end of the replay); None when it was really refused. ``worst_case`` marks an
    attempt really refused but admitted under the proposal: charged its full hold."""

    request_id: str
    time: datetime
    team: str
    holds: Mapping[str, int]
    real: Verdict
    proposed: Verdict
    real_charges: Mapping[str, int] | None = None
    real_cost_micro: int | None = None
    variant: str | None = None  # the split variant that served it (tag ``fb.variant``), if any

    @property
    def hold_micro(self) -> int:
        return max(self.holds.values(), default=0)

    @property
    def worst_case(self) -> bool:
        return self.proposed.admitted and not self.real.admitted

    def charges(self, which: Literal["real", "proposed"]) -> Mapping[str, int]:
        """Per-scope charge under reality or the proposal ({} when refused)."""
        verdict = self.real if which == "real" else self.proposed
        if not verdict.admitted:
            return {}
        if self.real_charges is None:  # really refused: the worst case, its hold
            return self.holds
        return self.real_charges

    def cost(self, which: Literal["real", "proposed"]) -> int:
        verdict = self.real if which == "real" else self.proposed
        if not verdict.admitted:
            return 0
        return self.hold_micro if self.real_cost_micro is None else self.real_cost_micro


@dataclass(frozen=True, slots=True)
class WhatIf:
    """Every attempt of the window, in replay order (see ``reconcile.whatif_report`` for the summaries)."""

    start: datetime
    end: datetime
    outcomes: tuple[Outcome, ...]

    def refused(self, which: Literal["real", "proposed"]) -> list[Outcome]:
        return [o for o in self.outcomes if not (o.real if which == "real" else o.proposed).admitted]

    def newly_refused(self) -> list[Outcome]:
        """Really admitted, refused under the proposal."""
        return [o for o in self.outcomes if o.real.admitted and not o.proposed.admitted]

    def newly_admitted(self) -> list[Outcome]:
        """Really refused, admitted under the proposal (charged their hold: the worst case)."""
        return [o for o in self.outcomes if o.worst_case]


def window(start_day: datetime, end_day: datetime) -> tuple[datetime, datetime]:
    """[start, end) in UTC for the inclusive day range ``--from``..``--to``."""
    if end_day < start_day:
        raise WhatIfError(f"--to {end_day:%Y-%m-%d} is before --from {start_day:%Y-%m-%d}")
    return start_day, end_day + timedelta(days=1)


def warmup_start(start: datetime, tz: ZoneInfo) -> datetime:
    """The start (a UTC instant) of the budget month ``start`` falls in: where the real balances begin."""
    local = start.astimezone(tz)
    return local.replace(day=1, hour=0, minute=0, second=0, microsecond=0).astimezone(start.tzinfo)


def decide(ledger: Ledger, proposal: Proposal, attempt: Attempt, tz: ZoneInfo) -> Verdict:
    """The proposal's decision for one attempt, with the gateway's order: the per-request cap, then the scopes."""
    amount = max(attempt.holds.values(), default=0)
    if exceeds_cost_cap(amount, proposal.per_request_cap_micro):
        return Verdict(False, "request_cost_cap_exceeded", None)
    scopes = list(attempt.holds)
    decision = decide_admit(ledger, scopes=scopes, amount_micro=amount, limits=proposal.limits(scopes),
                            period=period_of(attempt.time, tz))
    return ADMITTED if decision.ok else Verdict(False, decision.reason, decision.short_scope)


def replay(events: Iterable[Event], proposal: Proposal, *, start: datetime, end: datetime) -> WhatIf:
    """Replay ``events`` (log order, from ``warmup_start`` on) under ``proposal``; attempts in [start, end).

    Events before ``start`` are folded as they happened; attempts at or after ``end`` are not replayed,
    but settlements and expiries after ``end`` still close the window's requests."""
    tz = ZoneInfo(proposal.timezone)
    ledger = Ledger(tz)
    outcomes: list[Outcome] = []
    open_real: dict[str, Outcome] = {}  # really admitted in the window, not yet closed
    for event in events:
        if isinstance(event, (RequestAdmitted, RequestRefused)):
            if event.time < start:
                ledger.apply(event)  # reality: a refusal folds to nothing
                continue
            if event.time >= end:
                continue
            outcome = _attempt(ledger, proposal, event, tz)
            outcomes.append(outcome)
            if isinstance(event, RequestAdmitted):
                open_real[event.request_id] = outcome
        elif isinstance(event, (RequestSettled, HoldExpired)):
            ledger.apply(event)  # closes only holds the replay opened
            outcome = open_real.pop(event.request_id, None)
            if outcome is not None:
                if isinstance(event, RequestSettled):
                    outcome.real_charges, outcome.real_cost_micro = event.cost_by_scope, event.cost_micro
                else:
                    outcome.real_charges = event.charged
                    outcome.real_cost_micro = max(event.charged.values(), default=0)
    for outcome in open_real.values():  # still open at the end: its hold is what it has cost so far
        outcome.real_charges, outcome.real_cost_micro = outcome.holds, outcome.hold_micro
    return WhatIf(start, end, tuple(outcomes))


def _attempt(ledger: Ledger, proposal: Proposal, event: Attempt, tz: ZoneInfo) -> Outcome:
    """Decide one attempt under the proposal and fold the decision into the replay's ledger."""
    if isinstance(event, RequestAdmitted):
        real = ADMITTED
    else:
        real = Verdict(False, event.error_code, event.scope)
    proposed = decide(ledger, proposal, event, tz)
    if proposed.admitted:
        if isinstance(event, RequestAdmitted):
            ledger.apply(event)
        else:
            # Really refused, so no settlement follows: hold and charge it in full at once (the worst case).
            # Keyed by the refusal's event id, so a client's retry of the same request id stays apart.
            ledger.apply(RequestAdmitted(
                time=event.time, request_id=event.id, team=event.team, key_id=event.key_id,
                business_unit=event.business_unit, app=event.app, run_id=event.run_id, alias=event.alias,
                data_class="unknown", est_input_tokens=event.est_input_tokens,
                max_output_tokens=event.max_output_tokens, holds=event.holds, currency=event.currency,
                price_version=event.price_version, pod=event.pod, hold_ttl_s=0, stream=False))
            ledger.apply(HoldExpired(time=event.time, request_id=event.id, team=event.team,
                                     charged=event.holds, currency=event.currency))
    return Outcome(request_id=event.request_id, time=event.time, team=event.team, holds=event.holds,
                   real=real, proposed=proposed, variant=event.tags.get(VARIANT_TAG))


# --- reading the archive ------------------------------------------------------------------------

REPLAYED_TYPES = ("request.admitted", "request.refused", "request.settled", "hold.expired")
LATE_CLOSE = timedelta(days=1)  # settlements this long after the window still close its requests


def read_traffic(root: str | Path, start: datetime, end: datetime, tz: ZoneInfo) -> list[Event]:
    """The events ``replay`` needs, in log order: from the start of ``start``'s budget month to ``end`` plus
    ``LATE_CLOSE``. Partitions (Kafka's, keyed by team) are merged by event time, each kept in its own order.

    ``WhatIfError`` when the window itself has no archive, or a file cannot be read."""
    last_day = (end - timedelta(microseconds=1)).date()
    if not archive_files(root, start.date(), last_day):
        raise WhatIfError(f"no archive for {start:%Y-%m-%d}..{last_day:%Y-%m-%d} under {root}")
    try:
        table = read_archive(root, warmup_start(start, tz).date(), (end + LATE_CLOSE).date(),
                             columns=["type", "log_partition", "event"])
    except ArchiveError as exc:
        raise WhatIfError(str(exc)) from None
    table = table.filter(pc.is_in(table.column("type"), value_set=pa.array(REPLAYED_TYPES)))
    by_partition: dict[int, list[Event]] = {}
    for partition, text in zip(table.column("log_partition").to_pylist(), table.column("event").to_pylist()):
        try:
            by_partition.setdefault(partition, []).append(decode(text))
        except CodecError as exc:
            raise WhatIfError(f"an archived event of partition {partition} does not decode: {exc}") from None
    return list(heapq.merge(*by_partition.values(), key=lambda e: e.time))
