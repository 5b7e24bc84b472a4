"""A request's tab and what it costs: the pure settlement calculator.

A ``Tab`` is one request's record: who asked, the plan it was admitted
under, its attempts and running totals. The functions here turn a step of
the request into its event and numbers (``admitted_event``,
``attempt_record``, ``settlement``), pricing usage with the price version
the request was admitted under, so re-rating reproduces it exactly. No
clock, no port, no metric: ``now`` and latencies come in, values go out.
The metering shell (``proxy.metering.meter.Meter``) records what they return.

Invariants: a tab's ``total_cost`` is the sum of its attempts' costs; a
request is charged ``total_cost`` on every scope it holds; what exceeds the
hold is ``overrun``, recorded in ``request.settled``, never hidden.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

from ledger.events import RequestAdmitted, RequestAttempted, RequestSettled
from ledger.usage import TokenUsage
from pricing.money import to_decimal
from pricing.rating import rate
from proxy.errors import AttemptCut, UpstreamRateLimited, UpstreamRejected, UpstreamUnavailable
from proxy.snapshot import Alias, Deployment, KeyRecord, Snapshot


@dataclass(frozen=True, slots=True)
class Plan:
    """What admission decided a request may cost: its estimates, output cap and hold, at one price version."""

    est_input_tokens: int
    max_output_tokens: int
    hold_micro: int
    price_version: int


class AuditRecord(Protocol):
    """What the privacy step did to a request (``proxy.privacy.audit.PrivacyAudit``), as event fields."""

    def to_event_fields(self) -> dict[str, Any]: ...


_TIMEOUTS = frozenset({"upstream_timeout", "first_token_timeout", "upstream_idle_timeout"})


def scopes_of(key: KeyRecord, run_id: str | None) -> list[str]:
    """Every budget scope a request touches, innermost first."""
    scopes = [f"key:{key.key_id}", f"team:{key.team}"]
    if key.business_unit:
        scopes.append(f"bu:{key.business_unit}")
    if run_id:
        scopes.append(f"run:{run_id}")
    return scopes


def outcome_of(exc: BaseException | None) -> str:
    """The attempt's outcome class, as ``request.attempted`` carries it."""
    if exc is None:
        return "ok"
    if isinstance(exc, AttemptCut):
        return "client_closed"  # we closed it: the event's error_code says why (client_gone, hedge_lost, drained)
    if isinstance(exc, UpstreamRateLimited):
        return "rate_limited"
    if isinstance(exc, UpstreamUnavailable):
        return "timeout" if exc.code in _TIMEOUTS else "interrupted" if exc.code == "stream_interrupted" else "unavailable"
    if isinstance(exc, UpstreamRejected):
        return "rejected"
    return "error"


@dataclass(slots=True)
class Tab:
    """One request's record, from admission to settlement."""

    snapshot: Snapshot  # the one snapshot the request was served under
    request_id: str
    key: KeyRecord
    alias: Alias
    run_id: str | None
    data_class: str
    stream: bool
    scopes: list[str]
    plan: Plan | None = None
    holds: Mapping[str, int] = field(default_factory=dict)
    leases: dict[str, str] = field(default_factory=dict)  # scope -> lease funding its hold (lease wallets)
    attempts: int = 0
    total_usage: TokenUsage = field(default_factory=TokenUsage)
    total_cost: int = 0
    list_cost: int = 0  # what its attempts would have cost at their deployments' standard prices (batch savings)
    path: list[dict] = field(default_factory=list)  # deployment and outcome of each attempt, in order
    settled: bool = False
    cost_centre: str | None = None  # the app's, else the team's (``Snapshot.cost_centre_of``)
    tags: Mapping[str, str] = field(default_factory=dict)  # the caller's x-fb-tags
    retry_of: str | None = None  # a stream retried with the same Idempotency-Key: the first request's id
    privacy: AuditRecord | None = None  # what the privacy step did (kinds, counts, hashes; never values)
    cache_hit: bool = False  # answered from the response cache: no attempt, no cost
    cache_saved_micro: int = 0  # what that answer would have cost upstream
    cache_kind: str | None = None  # which cache answered the hit: "exact" | "semantic"
    cache_similarity: str | None = None  # a semantic hit's similarity, a decimal string
    api: str = "chat"  # the client surface: chat | responses | messages | embeddings


def admitted_event(tab: Tab, plan: Plan, leases: dict[str, str], pod: str, hold_ttl_s: int,
                   now: datetime) -> RequestAdmitted:
    """``request.admitted``: the same hold on every scope the request touches."""
    return RequestAdmitted(
        time=now, request_id=tab.request_id, team=tab.key.team, key_id=tab.key.key_id,
        business_unit=tab.key.business_unit or "", app=tab.key.app, run_id=tab.run_id, alias=tab.alias.name,
        data_class=tab.data_class, est_input_tokens=plan.est_input_tokens, max_output_tokens=plan.max_output_tokens,
        holds=dict.fromkeys(tab.scopes, plan.hold_micro), currency=tab.snapshot.currency,
        price_version=plan.price_version, pod=pod, hold_ttl_s=hold_ttl_s, stream=tab.stream, leases=leases,
        cost_centre=tab.cost_centre, tags=tab.tags, retry_of=tab.retry_of, api=tab.api,
        **(tab.privacy.to_event_fields() if tab.privacy is not None else {}),
    )


def cost_of(snapshot: Snapshot, price_version: int, dep: Deployment, usage: TokenUsage, now: datetime) -> int:
    """``usage`` at ``dep``'s price in ``price_version`` for the tier it was served at, in micro-units of the budget
    currency."""
    if not (usage.prompt_tokens or usage.completion_tokens):
        return 0
    price = snapshot.price_book.get(price_version).served(dep.id, usage.service_tier)
    return rate(usage, price, snapshot.fx.rate(price.currency, snapshot.currency, now))


@dataclass(slots=True)  # built per request: plain slots, no frozen-init cost
class AttemptRecord:
    event: RequestAttempted
    cost: int
    outcome: str
    code: str | None
    list_cost: int  # the same usage at the deployment's standard price (= cost unless a tier was served)


def attempt_record(tab: Tab, dep: Deployment, usage: TokenUsage, error: BaseException | None, *,
                   status: int | None, ttft_s: float | None, latency_ms: int, now: datetime) -> AttemptRecord:
    """The next attempt's event and cost; ``count`` adds it to the tab."""
    assert tab.plan is not None
    cost = cost_of(tab.snapshot, tab.plan.price_version, dep, usage, now)
    code = getattr(error, "code", None) or (type(error).__name__ if error else None)
    if status is None:
        status = getattr(error, "upstream_status", None) or (200 if error is None else 0)
    outcome = outcome_of(error)
    event = RequestAttempted(
        time=now, request_id=tab.request_id, team=tab.key.team, attempt=tab.attempts + 1, deployment=dep.id,
        provider=dep.provider, account=dep.account, model=dep.model, region=dep.region, outcome=outcome,
        status=status, ttft_ms=None if ttft_s is None else int(ttft_s * 1000), latency_ms=latency_ms, usage=usage,
        cost_micro=cost, currency=tab.snapshot.currency, price_version=tab.plan.price_version, error_code=code,
        usage_received=usage.received if usage.source == "provider_invalid" else None, project=dep.project,
    )
    listed = cost if usage.service_tier is None else cost_of(tab.snapshot, tab.plan.price_version, dep,
                                                             replace(usage, service_tier=None), now)
    return AttemptRecord(event, cost, outcome, code, listed)


def count(tab: Tab, record: AttemptRecord) -> None:
    """Fold one attempt into the tab's totals and path."""
    tab.attempts += 1
    tab.total_usage = add_usage(tab.total_usage, record.event.usage)
    tab.total_cost += record.cost
    tab.list_cost += record.list_cost
    tab.path.append({"deployment": record.event.deployment, "outcome": record.outcome, "code": record.code})


@dataclass(slots=True)  # built per request: plain slots, no frozen-init cost
class Settlement:
    event: RequestSettled
    charges: dict[str, int]  # scope -> what it is charged (the whole cost, on every scope)
    overrun: int  # cost beyond the hold


def settlement(tab: Tab, final_status: int, dep: Deployment | None, *, latency_ms: int, now: datetime) -> Settlement:
    """Replace the holds by the actual cost."""
    assert tab.plan is not None
    cost = tab.total_cost
    charges = dict.fromkeys(tab.holds, cost)
    overrun = max(cost - tab.plan.hold_micro, 0)
    event = RequestSettled(
        time=now, request_id=tab.request_id, team=tab.key.team, final_status=final_status, attempts=tab.attempts,
        deployment=dep.id if dep else None, usage=tab.total_usage, cost_micro=cost, currency=tab.snapshot.currency,
        cost_by_scope=charges, hold_released=dict(tab.holds), overrun_micro=overrun, cache_hit=tab.cache_hit,
        latency_ms=latency_ms, cache_saved_micro=tab.cache_saved_micro,
        cache_kind=(tab.cache_kind or "exact") if tab.cache_hit else None, cache_similarity=tab.cache_similarity,
    )
    return Settlement(event, charges, overrun)


def x_farebox(tab: Tab, dep: Deployment) -> dict:
    """The gateway's block on the final answer: where it went and what it cost."""
    return {
        "request_id": tab.request_id,
        "deployment": dep.id,
        "attempts": tab.attempts,
        "cost": str(to_decimal(tab.total_cost)),
        "cost_micro": tab.total_cost,
        "currency": tab.snapshot.currency,
        "price_version": tab.plan.price_version if tab.plan else None,
        "usage_source": tab.total_usage.source,
        "path": list(tab.path),
        # served at a cheaper (or dearer) tier than standard: what the standard price would have been
        **({"list_cost_micro": tab.list_cost} if tab.list_cost != tab.total_cost else {}),
    }


def add_usage(a: TokenUsage, b: TokenUsage) -> TokenUsage:
    """Sum of two attempts' usage: ``provider_invalid`` if any part was (its counts are an estimate), else
    estimated if any counted part was estimated, else provider."""
    if a.source == "provider_invalid" or b.source == "provider_invalid":
        source = "provider_invalid"
    else:
        b_counts = b.prompt_tokens + b.completion_tokens > 0
        source = "estimated" if a.source == "estimated" or (b.source == "estimated" and b_counts) else "provider"
    return TokenUsage(
        input=a.input + b.input,
        cached_input=a.cached_input + b.cached_input,
        cache_write=a.cache_write + b.cache_write,
        output=a.output + b.output,
        reasoning=a.reasoning + b.reasoning,
        source=source,  # type: ignore[arg-type]
        cache_write_1h=a.cache_write_1h + b.cache_write_1h,
    )
