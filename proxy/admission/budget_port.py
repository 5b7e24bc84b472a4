"""The ``BudgetPort``: what admission and settlement ask of budget money, whichever mode the pod runs in.

Adapters: ``LedgerBudgets`` (``budgets.py``: one process, exact holds on the
in-process ledger) and ``LeaseBudgets`` (``lease_budgets.py``: many pods,
holds funded from leases the ledger processor granted). Handlers and routing
hold a ``BudgetPort`` and never learn which adapter it is.

The contract every adapter keeps:

* ``admit`` funds a hold between ``ask.learned_micro`` and ``ask.hold_micro``
  (the worst case) on every limited scope, waiting at most ``ask.max_wait_s``
  (lease wallets: at least their ``lease_wait_s`` round trip) for holds in
  flight to settle, or raises the caller-facing ``GatewayError``
  (429 ``BudgetRefused`` ``budget_exhausted`` / ``budget_reserved`` /
  ``run_calls_exhausted``, 400 ``request_cost_cap_exceeded``, 503 ``budget_unavailable``). After its last
  ``await`` it must not suspend: the caller records ``request.admitted`` (then
  ``Funding.events``) in the same event-loop turn, so no other request can
  take the same money in between.
* ``settle`` replaces the hold by the actual charge per scope; ``release``
  gives an admitted hold back uncharged when ``request.admitted`` could not be
  recorded. Both are synchronous and idempotent.
* ``handed_over`` says a hold funded under one request id was recorded as the
  holds of others (a batch admitted whole: ``proxy.batches.reserve``): the
  port forgets that id's books and gives no money back (the other requests
  settle it, wherever they run).
* ``state`` is a scope's balance for the admin API, read where the adapter's
  mode keeps it (the in-process ledger, or the worker's projection); it may
  await, and is never on the request path.
* ``downgrade_target`` answers from what the pod already holds (no I/O): the
  cheaper alias a scope past its soft threshold asks for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Protocol
from zoneinfo import ZoneInfo

from ledger.admission import exceeds_cost_cap
from ledger.events import Event
from ledger.periods import period_of
from pricing.money import format_money
from proxy.errors import InvalidRequest
from proxy.snapshot import BudgetLimit, Snapshot


@dataclass(slots=True)  # built per request: plain slots, no frozen-init cost
class BudgetAsk:
    """One request's hold: the same amount on every scope it touches (innermost first)."""

    request_id: str
    scopes: Sequence[str]
    hold_micro: int
    est_input: int
    max_output: int
    now_s: float  # the pod's clock, epoch seconds
    learned_micro: int | None = None  # the hold at the output this key and alias really use (None: hold_micro)
    key_id: str = ""
    max_wait_s: float = 0.0  # how long the request may wait for holds in flight to settle
    hold_ttl_s: int | None = None  # how long the hold lives unsettled (None: the pod's ``hold_ttl_s``)
    cap_micro: int | None = None  # what the per-request cap is held to (None: hold_micro; a provider batch's
    # whole-batch hold gives its dearest line: the cap is per request, and each line is one)


@dataclass(slots=True)  # built per request: plain slots, no frozen-init cost
class Funding:
    """A funded hold. ``events`` are recorded right after ``request.admitted`` (threshold notices)."""

    leases: dict[str, str]  # scope -> lease funding the hold ({} when the ledger holds it directly)
    events: list[Event]
    remaining_micro: int | None  # the tightest limited scope after this hold; None: unknown or unlimited
    soft: bool  # some scope is past its soft threshold
    hold_micro: int | None = None  # what was held on every scope (None: the ask's ``hold_micro``)


@dataclass(frozen=True, slots=True)
class ScopeState:
    """A scope's money this period, as this pod knows it."""

    period: str
    settled: int
    held: int
    overrun: int
    requests: int
    soft: bool  # past its soft threshold
    leased: int = 0  # granted to pods as leases, not yet spent (distributed mode; 0 in embedded mode)


class BudgetPort(Protocol):
    async def admit(self, snapshot: Snapshot, ask: BudgetAsk) -> Funding: ...

    def settle(self, request_id: str, charges: Mapping[str, int]) -> None: ...

    def release(self, request_id: str) -> None: ...

    def handed_over(self, request_id: str) -> None: ...

    async def state(self, snapshot: Snapshot, scope: str, period: str | None, now_s: float) -> ScopeState | None:
        """The scope's balance in ``period`` (None: the current one); None: no balance is readable here (501)."""
        ...

    def downgrade_target(self, snapshot: Snapshot, scopes: Sequence[str], now_s: float) -> str | None: ...


_ZONES: dict[str, ZoneInfo] = {}


def budget_period(snapshot: Snapshot, now_s: float) -> str:
    """The budget month at ``now_s`` (epoch seconds) in the snapshot's budget timezone."""
    name = snapshot.budgets.timezone
    zone = _ZONES.get(name)
    if zone is None:
        zone = _ZONES[name] = ZoneInfo(name)
    return period_of(datetime.fromtimestamp(now_s, timezone.utc), zone)


def limits_for(snapshot: Snapshot, scopes: Sequence[str]) -> dict[str, BudgetLimit]:
    """The scopes that carry a money limit or a call cap, with it."""
    out = {}
    for scope in scopes:
        limit = snapshot.budgets.limit_for(scope)
        if limit is not None and (limit.limit_micro is not None or limit.max_calls is not None):
            out[scope] = limit
    return out


def max_wait_s(header: str | None, default_s: float, ceiling_s: float) -> float:
    """The wait the caller allows (``x-fb-max-wait-ms``), else the default; a 400 naming the header if bad."""
    if header is None:
        return default_s
    text = header.strip()
    if not (text.isascii() and text.isdigit()):
        raise InvalidRequest(f"x-fb-max-wait-ms must be a whole number of milliseconds >= 0, got {header[:40]!r}.",
                             param="x-fb-max-wait-ms", code="invalid_value")
    wait_ms = int(text)
    if wait_ms > ceiling_s * 1000:
        raise InvalidRequest(f"x-fb-max-wait-ms is {wait_ms}, above this gateway's ceiling of "
                             f"{int(ceiling_s * 1000)} ms.", param="x-fb-max-wait-ms", code="invalid_value")
    return wait_ms / 1000


def check_cost_cap(snapshot: Snapshot, ask: BudgetAsk) -> None:
    """The per-request cap (denial of wallet): a 400 naming max_completion_tokens."""
    cap = snapshot.budgets.per_request_cap_micro
    if not exceeds_cost_cap(ask.hold_micro if ask.cap_micro is None else ask.cap_micro, cap):
        return
    assert cap is not None
    ccy = snapshot.currency
    raise InvalidRequest(
        f"This request may cost up to {format_money(ask.hold_micro, ccy)} ({ask.est_input:,} input + "
        f"{ask.max_output:,} max output tokens), above the per-request cap of {format_money(cap, ccy)}. "
        "Lower max_completion_tokens or shorten the prompt.",
        code="request_cost_cap_exceeded",
        param="max_completion_tokens",
    )
