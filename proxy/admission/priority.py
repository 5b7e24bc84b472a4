"""Priority classes at the outbound door: batch work takes only the provider capacity interactive traffic
leaves, and stops before interactive traffic would feel it.

Every request has a class: ``interactive`` (the default) or ``batch`` (a batch line, or a caller that says
``x-fb-priority: batch``; a batch line cannot say otherwise). Interactive requests go as before. A batch request
is cleared for the outbound *before* it is admitted (``clear_batch``), so a batch line that must wait leaves no
hold and no event behind: it is answered 429 ``batch_paused`` with ``Retry-After`` and the batch runner puts the
line back in its queue (the batch store) for later.

A batch request is cleared onto a deployment only when

* none of the alias's deployments is paused by a provider 429 (or was within ``RECENT_S``) or has an open
  breaker: with headroom falling, the remaining deployments carry interactive failover and batch waits; and
* the deployment's provider-limit mirrors (and its concurrent sequences) hold the request's draws *plus* a
  reserve of ``reserve_pct`` of each bucket, which stays for interactive requests (the reserve is reserved with the draws, then given back at
  once, so the check and the take are one atomic step of the bucket backend, in memory or in Redis).

The cleared deployment's draws are kept on the meter, so the attempt does not take them twice; the batch line
is pinned to it (no failover: a failed batch line is given back and tried later). Pure but for the bucket
reservation (``clear_batch``).
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from proxy.admission.ratelimit import deployment_draws
from proxy.errors import InvalidRequest, RateLimited
from proxy.limits import Buckets
from proxy.limits.draws import Draw
from proxy.routing.state import RoutingState
from proxy.snapshot import Deployment, Snapshot

INTERACTIVE, BATCH = "interactive", "batch"
CLASSES = (INTERACTIVE, BATCH)
HEADER = "x-fb-priority"
RECENT_S = 5.0  # a provider 429 this recent still pauses batch work on its alias
DEFAULT_RESERVE_PCT = 20


class BatchPaused(RateLimited):
    code = "batch_paused"

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message, headers={"Retry-After": str(retry_after_s), "x-should-retry": "true"})


def request_class(headers: Mapping[str, str], batch_line: bool) -> str:
    """The request's class (module docstring); an unknown ``x-fb-priority`` is a 400 naming it."""
    if batch_line:
        return BATCH
    asked = headers.get(HEADER)
    if asked is None:
        return INTERACTIVE
    asked = asked.strip().lower()
    if asked not in CLASSES:
        raise InvalidRequest(f"The {HEADER} header must be one of {list(CLASSES)}.", param=HEADER,
                             code="invalid_priority")
    return asked


def falling(state: RoutingState, deps: Sequence[Deployment], now: float) -> Deployment | None:
    """The first deployment of the alias whose headroom is falling (a recent provider 429, a breaker not
    closed), or None."""
    for dep in deps:
        if state.paused_until.get(dep.id, 0.0) + RECENT_S > now:
            return dep
        b = state.breakers.get(dep.id)
        if b is not None and b.state != "closed":
            return dep
    return None


def with_reserve(draws: list[Draw], reserve_pct: int) -> list[tuple[Draw, int]]:
    """Each draw with the extra units a batch request must find above it (``reserve_pct`` of the bucket)."""
    return [(d, math.ceil(d.spec.capacity * reserve_pct / 100)) for d in draws]


async def clear_batch(limits: Buckets, state: RoutingState, snap: Snapshot,
                      alias_deps: Sequence[Deployment], cands: Sequence[Deployment], est_input: int,
                      max_output: int, now_us: int, reserve_pct: int = DEFAULT_RESERVE_PCT
                      ) -> tuple[Deployment, list[Draw]]:
    """The deployment a batch request may go to now and the draws taken from its mirrors; else ``BatchPaused``."""
    now = state.clock()
    hot = falling(state, alias_deps, now)
    if hot is not None:
        wait = max(1, math.ceil(state.paused_until.get(hot.id, 0.0) + RECENT_S - now))
        raise BatchPaused(f"Batch work on this model is paused: deployment {hot.id} is short of capacity and "
                          "interactive requests come first.", min(wait, 60))
    retry = 60
    for dep in cands:
        draws = deployment_draws(snap, dep, est_input, max_output)
        if not draws:
            return dep, []  # no provider limits known for it: nothing to hold back
        padded = with_reserve(draws, reserve_pct)
        res = await limits.reserve([(d.spec, d.amount + extra) for d, extra in padded], now_us)
        if res.ok:
            await limits.adjust([(d.spec, -extra) for d, extra in padded if extra], now_us)  # the reserve: back now
            return dep, draws
        short = next((d for d in draws if d.spec.key == res.failed_key), None)
        retry = min(retry, 1 if short is not None and short.kind == "sequences" else max(res.retry_after_s, 1))
    raise BatchPaused("Batch work on this model waits: its deployments' provider limits are kept for interactive "
                      "requests right now.", retry)

