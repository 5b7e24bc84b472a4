"""The request's chain of candidates: its alias's deployments, best first, then the fallback alias's.

The thin I/O shell around ``router.route``: it reads the deployment-mirror
buckets for headroom (so traffic moves before a provider says 429) and
appends ``fallback_alias`` only when the caller allowed it
(``x-fb-allow-fallback: true``): a fallback may be a different model, and
callers must opt in to a different answer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Mapping

from proxy.errors import GatewayError
from proxy.limits import Buckets
from proxy.limits.draws import mirror_specs, sequence_spec
from proxy.routing.router import Needs, NoDeploymentAvailable, ProviderCapacity, route
from proxy.routing.state import RoutingState
from proxy.snapshot import Alias, Deployment, KeyRecord, Snapshot

LOW_WATER = 0.2  # below this share of a mirror bucket left, weight shrinks in proportion
HEADROOM_TTL_S = 0.25  # reuse a deployment's reading this long (each peek may be a Redis round trip)


@dataclass(frozen=True, slots=True)
class Chain:
    """The ordered plan for one request: candidates best first, and what was asked of them."""

    deployments: list[Deployment]
    max_attempts: int
    alias: Alias
    snapshot: Snapshot
    needs: Needs
    fallback_from: int | None = None  # index of the first fallback-alias deployment


def allows_fallback(headers: Mapping[str, str]) -> bool:
    return headers.get("x-fb-allow-fallback", "").strip().lower() == "true"


def key_regions(key: KeyRecord) -> frozenset[str] | None:
    """The regions a residency-pinned key may use (None: not pinned)."""
    return key.regions or None


def key_deployments(key: KeyRecord) -> frozenset[str] | None:
    """Deployments a key is restricted to (None: any of its aliases')."""
    return key.deployments or None


async def headroom(limits: Buckets, state: RoutingState, snap: Snapshot, deps: list[Deployment],
                   now_us: int) -> dict[str, float]:
    """Weight factor per deployment from its provider-limit mirror and free sequences: 1 with room, down to 0.05
    near empty."""
    pct = snap.rate_limits.mirror_pct
    now = state.clock()
    cache = state.headroom
    out: dict[str, float] = {}
    for dep in deps:
        cached = cache.get(dep.id)
        if cached is not None and now - cached[0] < HEADROOM_TTL_S:
            if cached[1] < 1.0:
                out[dep.id] = cached[1]
            continue
        worst = 1.0
        for _, spec, _ in mirror_specs(dep, pct):
            level = await limits.peek(spec, now_us)
            worst = min(worst, max(level, 0) / spec.capacity)
        seqs = sequence_spec(dep)
        if seqs is not None:  # free slots of a fleet's concurrent sequences
            worst = min(worst, max(await limits.peek(seqs, now_us), 0) / seqs.capacity)
        factor = max(worst / LOW_WATER, 0.05) if worst < LOW_WATER else 1.0
        cache[dep.id] = (now, factor)
        if factor < 1.0:
            out[dep.id] = factor
    return out


async def chain_for(
    limits: Buckets, state: RoutingState, rng: random.Random, now_us: int,
    snap: Snapshot, alias: Alias, needs: Needs, sticky: str | None, allow_fallback: bool,
) -> Chain:
    """Ordered candidates; raises the primary alias's refusal when neither it nor its fallback can serve."""
    now = state.clock()
    primary: list[Deployment] = []
    refusal: GatewayError | None = None
    try:
        room = await headroom(limits, state, snap, [snap.deployments[d] for d in alias.deployments], now_us)
        primary = route(snap, alias, needs, state, now, rng, sticky, room)
    except (NoDeploymentAvailable, ProviderCapacity) as exc:
        refusal = exc
    fallback: list[Deployment] = []
    fb_alias = snap.aliases.get(alias.fallback_alias) if allow_fallback and alias.fallback_alias else None
    if fb_alias is not None:
        try:
            room = await headroom(limits, state, snap, [snap.deployments[d] for d in fb_alias.deployments], now_us)
            fallback = [d for d in route(snap, fb_alias, needs, state, now, rng, sticky, room) if d not in primary]
        except GatewayError:
            fallback = []  # the fallback cannot serve this request either; the primary's answer stands
    if not primary and not fallback:
        assert refusal is not None
        raise refusal
    return Chain(primary + fallback, alias.max_attempts + (1 if fallback else 0), alias, snap, needs,
                 len(primary) if fallback else None)
