"""One request's record: admitted, each attempt, settled — priced and appended.

A ``Meter`` lives for one request. It prices usage with the price version
the request was admitted under (so re-rating reproduces it) and appends
events without waiting (the log acknowledges in the background).
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

from ledger.events import RequestAdmitted, RequestAttempted, RequestSettled
from pricing.calibration import Estimate
from pricing.money import to_decimal
from pricing.rating import rate
from pricing.usage import TokenUsage
from proxy.admission.plan import Plan
from proxy.admission.ratelimit import Draw, settlement
from proxy.errors import UpstreamRateLimited, UpstreamRejected, UpstreamUnavailable
from proxy.runtime import Runtime
from proxy.snapshot import Alias, Deployment, KeyRecord, Snapshot


def scopes_of(key: KeyRecord, run_id: str | None) -> list[str]:
    """Every budget scope a request touches, innermost first."""
    scopes = [f"key:{key.key_id}", f"team:{key.team}"]
    if key.business_unit:
        scopes.append(f"bu:{key.business_unit}")
    if run_id:
        scopes.append(f"run:{run_id}")
    return scopes


def outcome_of(exc: BaseException | None) -> str:
    if exc is None:
        return "ok"
    if isinstance(exc, (ClientGone, HedgeLost, Drained)):
        return "client_closed"  # we closed it: the event's error_code says why (client_gone, hedge_lost, drained)
    if isinstance(exc, UpstreamRateLimited):
        return "rate_limited"
    if isinstance(exc, UpstreamUnavailable):
        return "timeout" if exc.code in ("upstream_timeout", "first_token_timeout", "upstream_idle_timeout") else (
            "interrupted" if exc.code == "stream_interrupted" else "unavailable"
        )
    if isinstance(exc, UpstreamRejected):
        return "rejected"
    return "error"


class Meter:
    def __init__(
        self,
        rt: Runtime,
        snapshot: Snapshot,
        request_id: str,
        key: KeyRecord,
        alias: Alias,
        *,
        run_id: str | None,
        data_class: str,
        stream: bool,
    ) -> None:
        self.rt = rt
        self.snapshot = snapshot
        self.request_id = request_id
        self.key = key
        self.alias = alias
        self.run_id = run_id
        self.data_class = data_class
        self.stream = stream
        self.started = time.monotonic()
        self.attempts = 0
        self.plan: Plan | None = None
        self.scopes = scopes_of(key, run_id)
        self.holds: dict[str, int] = {}
        self.leases: dict[str, str] = {}  # distributed: scope -> lease funding its hold
        self.total_usage = TokenUsage()
        self.total_cost = 0
        self.settled = False
        self.draws: list[Draw] = []  # rate-limit reservations of the request (key, team)
        self.dep_draws: dict[str, list[Draw]] = {}  # ... and of each deployment tried
        self.estimates: dict[str, Estimate] = {}  # input-token estimate per candidate, for calibration
        self.path: list[dict] = []  # the attempt path: deployment and outcome of each attempt, in order

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.rt.clock(), timezone.utc)

    def admitted(self, plan: Plan) -> None:
        self.plan = plan
        self.holds = {s: plan.hold_micro for s in self.scopes}
        self.rt.emit(
            RequestAdmitted(
                time=self._now(),
                request_id=self.request_id,
                team=self.key.team,
                key_id=self.key.key_id,
                business_unit=self.key.business_unit or "",
                app=self.key.app,
                run_id=self.run_id,
                alias=self.alias.name,
                data_class=self.data_class,
                est_input_tokens=plan.est_input_tokens,
                max_output_tokens=plan.max_output_tokens,
                holds=self.holds,
                currency=self.snapshot.currency,
                price_version=plan.price_version,
                pod=self.rt.options.pod_id,
                hold_ttl_s=self.rt.options.hold_ttl_s,
                stream=self.stream,
                leases=self.leases,
            )
        )

    def cost(self, dep: Deployment, usage: TokenUsage) -> int:
        assert self.plan is not None
        version = self.snapshot.price_book.get(self.plan.price_version)
        price = version.price(dep.id)
        fx = self.snapshot.fx.rate(price.currency, self.snapshot.currency, self._now())
        return rate(usage, price, fx)

    def attempted(
        self,
        dep: Deployment,
        *,
        started: float,
        usage: TokenUsage | None,
        error: BaseException | None = None,
        ttft_s: float | None = None,
        status: int | None = None,
    ) -> int:
        """Record one attempt; returns its cost in micro-units."""
        assert self.plan is not None
        self.attempts += 1
        usage = usage or TokenUsage(source="provider")
        if error is None and dep.id in self.estimates:
            self.rt.estimator.observe(self.estimates[dep.id], usage, key_id=self.key.key_id, model_family=dep.provider)
        self.rt.adjust_limits(settlement(self.dep_draws.pop(dep.id, []), usage))
        cost = self.cost(dep, usage) if (usage.prompt_tokens or usage.completion_tokens) else 0
        self.total_usage = _add(self.total_usage, usage)
        self.total_cost += cost
        code = getattr(error, "code", None) or (type(error).__name__ if error else None)
        upstream_status = getattr(error, "upstream_status", None)
        outcome = outcome_of(error)
        self.path.append({"deployment": dep.id, "outcome": outcome, "code": code})
        self.rt.metrics.attempts.labels(dep.id, outcome).inc()
        self.rt.emit(
            RequestAttempted(
                time=self._now(),
                request_id=self.request_id,
                team=self.key.team,
                attempt=self.attempts,
                deployment=dep.id,
                provider=dep.provider,
                account=dep.account,
                model=dep.model,
                region=dep.region,
                outcome=outcome,
                status=status if status is not None else (upstream_status or (200 if error is None else 0)),
                ttft_ms=None if ttft_s is None else int(ttft_s * 1000),
                latency_ms=int((time.monotonic() - started) * 1000),
                usage=usage,
                cost_micro=cost,
                currency=self.snapshot.currency,
                price_version=self.plan.price_version,
                error_code=code,
            )
        )
        return cost

    def x_farebox(self, dep: Deployment) -> dict:
        """The gateway's block on the final answer: where it went and what it cost."""
        return {
            "request_id": self.request_id,
            "deployment": dep.id,
            "attempts": self.attempts,
            "cost": str(to_decimal(self.total_cost)),
            "cost_micro": self.total_cost,
            "currency": self.snapshot.currency,
            "price_version": self.plan.price_version if self.plan else None,
            "usage_source": self.total_usage.source,
            "path": list(self.path),
        }

    def settle(self, final_status: int, dep: Deployment | None) -> None:
        """Replace the holds by the actual cost; settling twice is a no-op."""
        if self.settled or self.plan is None:
            return
        self.settled = True
        self.rt.adjust_limits(settlement(self.draws, self.total_usage))
        cost = self.total_cost
        if self.rt.wallets is not None:
            self.rt.wallets.settle(self.request_id, dict.fromkeys(self.holds, cost))
        overrun = max(cost - self.plan.hold_micro, 0)
        metrics = self.rt.metrics
        metrics.requests.labels(self.alias.name, str(final_status)).inc()
        if overrun:  # recorded, never hidden: in the event and here
            metrics.overruns.inc()
            metrics.overrun_micro.inc(overrun)
        self.rt.emit(
            RequestSettled(
                time=self._now(),
                request_id=self.request_id,
                team=self.key.team,
                final_status=final_status,
                attempts=self.attempts,
                deployment=dep.id if dep else None,
                usage=self.total_usage,
                cost_micro=cost,
                currency=self.snapshot.currency,
                cost_by_scope={s: cost for s in self.holds},
                hold_released=dict(self.holds),
                overrun_micro=overrun,
                cache_hit=False,
                latency_ms=int((time.monotonic() - self.started) * 1000),
            )
        )


class ClientGone(Exception):
    """The caller disconnected mid-stream."""

    code = "client_gone"


class HedgeLost(Exception):
    """A hedged attempt cancelled because another deployment answered first."""

    code = "hedge_lost"


class Drained(Exception):
    """A stream ended by the pod's graceful drain deadline."""

    code = "drained"


def _add(a: TokenUsage, b: TokenUsage) -> TokenUsage:
    """Sum of two attempts' usage; estimated if any counted part was estimated."""
    b_counts = b.prompt_tokens + b.completion_tokens > 0
    estimated = a.source == "estimated" or (b.source == "estimated" and b_counts)
    return TokenUsage(
        input=a.input + b.input,
        cached_input=a.cached_input + b.cached_input,
        cache_write=a.cache_write + b.cache_write,
        output=a.output + b.output,
        reasoning=a.reasoning + b.reasoning,
        source="estimated" if estimated else "provider",
    )
