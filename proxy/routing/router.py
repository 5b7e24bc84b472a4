"""Alias -> ordered candidate deployments: filter what may not serve, then score.

Hard filters first, each explaining itself when nothing is left: capability
(the parameter that needs it), data class (restricted data only on
self-hosted deployments), region residency (refuse rather than go abroad),
the key's allowance, the context window. Then what is unavailable right now:
an open circuit, a 429 pause. The survivors are ordered by weight x health x
headroom; the first is the pick, the rest the failover order.

The order is weighted rendezvous hashing: each deployment draws
``-ln(u) / weight`` and the smallest wins (the same distribution as a
weighted shuffle). ``u`` comes from a hash of a sticky key when there is one
(session, user, or a long shared prompt prefix), so the same conversation and
the same cached prefix keep landing on the same deployment, and a canary
weight splits users stably; otherwise from the random generator. A deployment of weight 0 is a standby:
it comes after every weighted one (standbys among themselves in an even draw), so it serves only failover.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass
from typing import Iterable, Mapping

import orjson

from proxy.errors import GatewayError, InvalidRequest, PermissionDenied, UnsupportedParameter, UpstreamUnavailable
from proxy.hashing import held_update
from proxy.routing.state import RoutingState
from proxy.snapshot import Alias, Deployment, Snapshot

PREFIX_CHARS = 4096  # ~1,024 tokens: provider prompt caches key on at least this much


@dataclass(frozen=True, slots=True)
class Needs:
    """What a request requires of a deployment, with the parameter that asked."""

    capabilities: tuple[tuple[str, str], ...]  # (capability, param)
    data_class: str  # what a self-hosted deployment receives
    min_context: int
    regions: frozenset[str] | None = None  # residency-pinned callers: only these regions
    allowed: frozenset[str] | None = None  # deployments the key may use; None = all of the alias
    outside_class: str | None = None  # what the others receive (after redaction); None = data_class
    outside_refused: bool = False  # the privacy policy keeps the request from the others
    team: str | None = None  # the caller's team: a provisioned deployment serves its own team only

    def class_for(self, dep: Deployment) -> str | None:
        """The class ``dep`` would receive, or None when it may not receive the request at all."""
        if dep.self_hosted:
            return self.data_class
        if self.outside_refused:
            return None
        return self.outside_class or self.data_class


class NoDeploymentAvailable(GatewayError):
    """Every deployment that may serve the request is unavailable right now (circuit open, paused)."""

    status = 503
    type = "api_error"
    code = "no_deployment_available"


class PinnedUnavailable(NoDeploymentAvailable):
    """Every deployment a pinned key may use is unavailable, and the pin kept the request from the others."""

    code = "pinned_deployments_unavailable"


class ProviderCapacity(GatewayError):
    """Every deployment that may serve the request answered 429 and is paused for its Retry-After."""

    status = 429
    type = "rate_limit_error"
    code = "provider_capacity"


def chat_needs(body: dict, data_class: str, min_context: int, regions: frozenset[str] | None = None,
               allowed: frozenset[str] | None = None, outside_class: str | None = None,
               outside_refused: bool = False, team: str | None = None) -> Needs:
    caps: list[tuple[str, str]] = []
    if body.get("tools"):
        caps.append(("tools", "tools"))
    rf = body.get("response_format")
    if isinstance(rf, dict) and rf.get("type") in ("json_schema", "json_object"):
        caps.append(("json_schema" if rf["type"] == "json_schema" else "json_object", "response_format"))
    if _has_images(body.get("messages") or ()):
        caps.append(("vision", "messages"))
    return Needs(tuple(caps), data_class, min_context, regions, allowed, outside_class, outside_refused, team)


def _has_images(messages: Iterable[dict]) -> bool:
    for msg in messages:
        content = msg.get("content")
        if isinstance(content, list) and any(p.get("type") == "image_url" for p in content):
            return True
    return False


def _capable(dep: Deployment, cap: str) -> bool:
    # json_object is implied by json_schema support.
    return cap in dep.capabilities or (cap == "json_object" and "json_schema" in dep.capabilities)


def may_receive(dep: Deployment, data_class: str) -> bool:
    return data_class in dep.data_classes and (data_class != "restricted" or dep.self_hosted)


def _receives(dep: Deployment, needs: Needs) -> bool:
    cls = needs.class_for(dep)
    return cls is not None and may_receive(dep, cls)


def _may_use(dep: Deployment, needs: Needs) -> bool:
    """A provisioned deployment serves its owning team, and keys pinned to it by name (the canary's)."""
    owner = dep.provisioned_team
    return owner is None or owner == needs.team or (needs.allowed is not None and dep.id in needs.allowed)


def reserved_first(deps: list[Deployment]) -> list[Deployment]:
    """``deps`` with the provisioned ones (the caller's own: the others were filtered out) first, each part in
    its order: the team's reserved capacity is used before the shared deployments, which take what spills."""
    if not any(d.provisioned_team for d in deps):
        return deps
    return [d for d in deps if d.provisioned_team] + [d for d in deps if not d.provisioned_team]


def eligible(snapshot: Snapshot, alias: Alias, needs: Needs) -> list[Deployment]:
    """The alias's deployments that may serve the request, in config order; raises when none may."""
    deps = [snapshot.deployments[d] for d in alias.deployments]
    for cap, param in needs.capabilities:
        deps = [d for d in deps if _capable(d, cap)]
        if not deps:
            raise UnsupportedParameter(param, f"any deployment of alias {alias.name}", f"needs capability '{cap}'")
    kept = [d for d in deps if _receives(d, needs)]
    if not kept:
        extra = " (restricted data only goes to self-hosted deployments)" if needs.data_class == "restricted" else ""
        raise PermissionDenied(
            f"No deployment of alias '{alias.name}' may receive data of class '{needs.data_class}'{extra}; "
            "the request was not sent.",
            code="data_class_not_routable",
        )
    if needs.regions is not None:
        kept = [d for d in kept if d.region in needs.regions]
        if not kept:
            raise PermissionDenied(
                f"This key is pinned to region(s) {', '.join(sorted(needs.regions))} and no deployment of alias "
                f"'{alias.name}' is there; the request was not sent abroad.",
                code="region_not_routable",
            )
    if needs.allowed is not None:
        kept = [d for d in kept if d.id in needs.allowed]
        if not kept:
            raise PermissionDenied(f"This key may not use any deployment of alias '{alias.name}'.",
                                   code="deployment_not_allowed")
    kept = [d for d in kept if _may_use(d, needs)]
    if not kept:
        raise PermissionDenied(
            f"Every deployment of alias '{alias.name}' this request may use is provisioned capacity of another "
            "team; the request was not sent.", code="deployment_reserved")
    fits = [d for d in kept if d.context_window >= needs.min_context]
    if not fits:
        largest = max(d.context_window for d in kept)
        raise InvalidRequest(
            f"This request needs about {needs.min_context} tokens (input estimate + output cap); "
            f"the largest context window of alias '{alias.name}' is {largest} tokens.",
            param="messages",
            code="context_length_exceeded",
        )
    return fits


def candidates(snapshot: Snapshot, alias: Alias, needs: Needs, rng: random.Random) -> list[Deployment]:
    """Eligible deployments in weighted random order (no live state)."""
    return reserved_first(weighted_order(eligible(snapshot, alias, needs), rng))


def route(
    snapshot: Snapshot, alias: Alias, needs: Needs, state: RoutingState, now: float,
    rng: random.Random, sticky: str | None = None, headroom: Mapping[str, float] | None = None,
) -> list[Deployment]:
    """Eligible and available deployments, best first; raises when none is available now.

    Deployments paused by a 429 come last, soonest-free first: the failover
    loop calls one only as a last resort, when nothing else could be tried
    (then the provider's own 429 is the answer, which costs nothing).
    """
    deps = eligible(snapshot, alias, needs)
    blocked = {d.id: state.blocked(d, now) for d in deps}
    live = [d for d in deps if blocked[d.id] is None]
    paused = sorted((d for d in deps if blocked[d.id] == "paused"), key=lambda d: state.wait_s(d, now))
    if not live and not paused:
        refusal = unavailable(alias, deps, state, now, needs.data_class)
        raise pinned_refusal(snapshot, alias, needs.data_class, needs.regions, needs.allowed, refusal,
                             blocked_list(deps, state, now))
    factors = state.weight_factors(live, now)
    weights = {d.id: d.weight * factors[d.id] * (headroom or {}).get(d.id, 1.0) for d in live}
    return reserved_first(weighted_order(live, rng, weights, sticky if alias.sticky else None)) + paused


def unavailable(alias: Alias, deps: list[Deployment], state: RoutingState, now: float, data_class: str) -> GatewayError:
    """The refusal when every eligible deployment is blocked: 429 if all are paused by 429s, else 503."""
    wait = max(1, math.ceil(min(state.wait_s(d, now) for d in deps)))
    reasons = {d.id: state.blocked(d, now) or "busy" for d in deps}
    listed = blocked_list(deps, state, now)
    headers = {"Retry-After": str(wait)}
    if all(r == "paused" for r in reasons.values()):
        return ProviderCapacity(
            f"Every deployment of alias '{alias.name}' is at its provider's rate limit: {listed}.", headers=headers)
    only = " may receive restricted data (self-hosted only) and" if data_class == "restricted" else ""
    return NoDeploymentAvailable(
        f"No deployment of alias '{alias.name}' that{only} may serve this request is available now: {listed}. "
        "The request was not sent.",
        headers=headers,
    )


def pinned_out(snapshot: Snapshot, alias: Alias, data_class: str, regions: frozenset[str] | None,
               allowed: frozenset[str] | None) -> list[Deployment]:
    """The alias's deployments that may receive ``data_class`` but that the key's pin rules out."""
    return [d for d in (snapshot.deployments[i] for i in alias.deployments)
            if may_receive(d, data_class)
            and ((regions is not None and d.region not in regions) or (allowed is not None and d.id not in allowed))]


def pinned_refusal(snapshot: Snapshot, alias: Alias, data_class: str, regions: frozenset[str] | None,
                   allowed: frozenset[str] | None, cause: GatewayError, why: str | None = None) -> GatewayError:
    """``cause`` (what the key may use is unavailable) told as the pin's doing when the pin ruled out
    deployments that could have taken the request; else ``cause`` itself. ``why`` replaces the cause's
    message as the detail. Names regions and deployments, never provider keys."""
    if not isinstance(cause, (UpstreamUnavailable, NoDeploymentAvailable)) or isinstance(cause, PinnedUnavailable):
        return cause
    others = pinned_out(snapshot, alias, data_class, regions, allowed)
    if not others:
        return cause
    pins = []
    if regions is not None:
        pins.append(f"region(s) {', '.join(sorted(regions))}")
    if allowed is not None:
        pins.append(f"deployment(s) {', '.join(sorted(allowed))}")
    plural = "s" if len(others) > 1 else ""
    return PinnedUnavailable(
        f"This key is pinned to {' and '.join(pins)}, and no deployment of alias '{alias.name}' it may use is "
        f"available ({why or 'last error: ' + cause.message.rstrip('.')}). The key's pin kept the request from "
        f"being sent to the alias's other deployment{plural} ({', '.join(d.id for d in others)}); "
        "the request was not sent elsewhere.",
        headers=cause.headers,
    )


def blocked_list(deps: list[Deployment], state: RoutingState, now: float) -> str:
    """``dep-a (circuit open), dep-b (paused)``: why each deployment is blocked right now."""
    return ", ".join(f"{d.id} ({(state.blocked(d, now) or 'busy').replace('_', ' ')})" for d in deps)


def weighted_order(deps: list[Deployment], rng: random.Random, weights: Mapping[str, float] | None = None,
                   sticky: str | None = None) -> list[Deployment]:
    if len(deps) == 1:
        return deps
    keyed = []
    for d in deps:  # a standby (weight 0) comes after every weighted deployment, standbys in an even draw
        w = 1.0 if d.weight == 0 else max((weights or {}).get(d.id, d.weight), 1e-9)
        u = _unit(sticky, d.id) if sticky is not None else (rng.random() or 1e-12)
        keyed.append((d.weight == 0, -math.log(u) / w, d))
    keyed.sort(key=lambda kd: kd[:2])
    return [d for *_, d in keyed]


def _unit(key: str, dep_id: str) -> float:
    """A stable uniform draw in (0, 1) for (key, deployment)."""
    h = hashlib.blake2b(f"{key}\x00{dep_id}".encode(), digest_size=8).digest()
    return (int.from_bytes(h, "big") + 0.5) / 2**64


def sticky_key(session: str | None, body: dict) -> str | None:
    """What keeps a request on one deployment: the session header, the ``user`` field, or a long prompt prefix."""
    if session:
        return "s:" + session
    user = body.get("user")
    if isinstance(user, str) and user:
        return "u:" + user
    prefix = orjson.dumps([body.get("tools"), body.get("messages")])[:PREFIX_CHARS]
    if len(prefix) >= PREFIX_CHARS:
        return "p:" + held_update(hashlib.blake2b(digest_size=16), prefix).hexdigest()
    return None

