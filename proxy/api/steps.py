"""The HTTP side of the steps every model request's handler shares.

The handlers (``chat.py``, ``embeddings.py``) read as the request path; what
they take from the HTTP request for the stages after them lives here:

* ``meter_for``: the request's meter (``proxy.metering.open_meter``), with what the
  caller's headers say (``x-fb-tags``, refused here if bad, before anything is held;
  ``x-fb-max-wait-ms``) and the request's trace; the access line reads it back;
* ``variant_of``: the alias a split sends the caller to (``proxy.routing.split``);
* ``outbound``: a batch request cleared onto a deployment before admission (``proxy.admission.priority``);
* ``plan``: the ordered chain of candidates (routing; reads the provider-limit mirrors);
* ``route_headers``: what an answer says about where it was served;
* ``input_tokens``: farebox's estimate for the token-count endpoints (Messages ``count_tokens``, Responses
  ``input_tokens``); ``counted``: what those endpoints answer: the provider's own count when the alias's first
  deployment speaks the client's API (and may see the request: the privacy policy decides as for the request
  itself, its placeholders in), else the estimate.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from aiohttp import web

from ledger.request_events import BATCH_TAG, CANARY_TAG, PRIORITY_TAG, SHADOW_TAG, VARIANT_TAG
from proxy.admission.auth import allowed_alias
from proxy.admission.budget_port import max_wait_s
from proxy.admission.plan import chat_input_estimates
from proxy.admission.priority import BATCH, clear_batch, request_class
from proxy.api.tags import HEADER, parse_tags
from proxy.errors import NOT_ADMITTED_HEADER, GatewayError
from proxy.limits.draws import Draw
from proxy.metering.meter import Meter, open_meter
from proxy.privacy.classify import classify_chat
from proxy.privacy.redact import Redaction
from proxy.routing.chain import Chain, chain_for
from proxy.routing.router import Needs
from proxy.routing.split import choose, split_value
from proxy.runtime import Runtime
from proxy.snapshot import Alias, Deployment, KeyRecord, Snapshot
from proxy.upstream.dialects import asked_tiers
from proxy.upstream.relay import forwarded_headers
from proxy.upstream.token_count import provider_count


def meter_for(rt: Runtime, snap: Snapshot, request: web.Request, key: KeyRecord, alias: Alias, *,
              run_id: str | None, data_class: str, stream: bool, **tab: Any) -> Meter:
    """The request's meter; ``tab`` passes ``retry_of``, ``privacy`` and ``estimates`` through."""
    tags = parse_tags(request.headers.get(HEADER))
    if (batch_id := request.get("batch_id")) is not None:  # a batch line: its events name the batch
        tags[BATCH_TAG] = batch_id
    if request.get("priority") == BATCH:
        tags[PRIORITY_TAG] = BATCH
    if (variant := request.get("variant")) is not None:  # a split's variant: the events say which
        tags[VARIANT_TAG] = variant
    if (shadowed := request.get("shadow_of")) is not None:  # a shadow leg: the alias it copies
        tags[SHADOW_TAG] = shadowed
    if (probed := request.get("canary")) is not None:  # a synthetic-canary probe: the deployment it checks
        tags[CANARY_TAG] = probed
    meter = open_meter(
        rt, snap, request["request_id"], key, alias, run_id=run_id, data_class=data_class, stream=stream,
        tags=tags, trace=request.get("trace"),
        max_wait_s=max_wait_s(request.headers.get("x-fb-max-wait-ms"), rt.options.budget_wait_s,
                              rt.options.budget_wait_max_s), **tab)
    meter.held = request.get("held_micro")  # a batch line whose batch was admitted whole: its hold
    request["meter"] = meter  # the access line reads the settled request from it
    return meter


def variant_of(request: web.Request, snap: Snapshot, key: KeyRecord, alias: Alias, body: dict) -> Alias:
    """The alias that serves the request: ``alias`` itself, or the variant of its split the caller sticks to
    (``proxy.routing.split``; the variant's name is kept for the meter's tags)."""
    if alias.split is None:
        return alias
    variant = choose(alias.split, alias.name, split_value(alias.split, request.headers, body, key.key_id))
    request["variant"] = variant.name
    return snap.aliases[variant.alias]


async def outbound(rt: Runtime, request: web.Request, snap: Snapshot, alias: Alias, alias_deps: list[Deployment],
                   cands: list[Deployment], est_input: int, max_output: int,
                   body: dict | None = None) -> tuple[list[Deployment], list[Draw]]:
    """The candidates after the request's priority class (``proxy.admission.priority``): an interactive request
    keeps them all; a batch request is cleared onto one deployment now, before it is admitted (its draws
    taken: handed to the meter), or refused 429 ``batch_paused`` with nothing held or recorded. A batch chat
    request (``body``) to a deployment that has the alias's ``batch_service_tier`` (``flex``: OpenAI, Bedrock,
    Vertex AI) asks for it when it names no tier: priced as that tier is served."""
    klass = request_class(request.headers, request.get("batch_id") is not None or "shadow_of" in request)
    request["priority"] = klass
    if klass != BATCH:
        return cands, []
    try:
        dep, draws = await clear_batch(rt.limits, rt.routing, snap, alias_deps, cands, est_input,
                                       max_output, rt.now_us(), rt.options.batch_reserve_pct)
    except GatewayError as exc:
        rt.metrics.refusals.labels(exc.code or "batch_paused").inc()
        if request.get("batch_id") is not None:
            exc.headers[NOT_ADMITTED_HEADER] = "1"  # before admission: the line keeps its id (and its batch's hold)
        raise
    if (body is not None and alias.batch_service_tier in asked_tiers(dep)
            and body.get("service_tier") is None):
        body["service_tier"] = alias.batch_service_tier
    return [dep], draws


async def plan(rt: Runtime, snap: Snapshot, alias: Alias, needs: Needs, sticky: str | None,
               allow_fallback: bool) -> Chain:
    return await chain_for(rt.limits, rt.routing, rt.rng, rt.now_us(), snap, alias, needs, sticky, allow_fallback)


def input_tokens(rt: Runtime, request: web.Request, alias_name: str, chat: dict) -> int:
    """A token-count endpoint's answer: farebox's input estimate for the chat request ``chat``, the most any of
    the alias's deployments would count (what admission holds against); nothing is admitted or billed."""
    snap = rt.pod.snapshot
    key = request["key"]
    alias = allowed_alias(snap, key, alias_name, "chat")
    deployments = [snap.deployments[d] for d in alias.deployments if d in snap.deployments]
    estimates = chat_input_estimates(rt.estimator, chat, key.key_id, deployments)
    return max((e.tokens for e in estimates.values()), default=0)


async def counted(rt: Runtime, request: web.Request, alias_name: str, chat: dict, *, dialect: str,
                  needs: str | None, native_body: Callable[[Redaction | None], dict]) -> tuple[int, str]:
    """(count, source: "provider" or "estimate") for a token-count endpoint (see the module docstring)."""
    snap, key = rt.pod.snapshot, request["key"]
    alias = allowed_alias(snap, key, alias_name, "chat")
    estimate = input_tokens(rt, request, alias_name, chat)
    dep = next((snap.deployments[d] for d in alias.deployments if d in snap.deployments
                and (not key.deployments or d in key.deployments)
                and (not key.regions or snap.deployments[d].region in key.regions)), None)
    if dep is None or dep.dialect != dialect or (needs is not None and needs not in dep.capabilities):
        return estimate, "estimate"
    privacy = classify_chat(snap.privacy, key, request.headers.get("x-fb-data-class"), chat)
    sent_class = privacy.data_class if dep.self_hosted else privacy.outside_class
    if sent_class is None or sent_class not in dep.data_classes:
        return estimate, "estimate"
    body = native_body(privacy.redaction if privacy.redacts(dep) else None)
    count = await provider_count(rt.upstream, dep, body, forwarded_headers(dep, request.headers))
    return (estimate, "estimate") if count is None else (count, "provider")


ARRIVED = "arrived"  # request key: perf_counter when the gateway took the request up (``proxy.api.app``)


def server_timing(response: web.StreamResponse, request: web.Request, meter: Meter, durable_from: float) -> None:
    """A whole answer's ``Server-Timing`` after admission's: ``upstream`` (its attempts' time at the provider),
    ``durable`` (the wait for its settlement to be on disk) and ``gateway`` (the rest since the gateway took the
    request up: its own work, admission included, and its queue), in ms. A streamed answer's headers left before these were known."""
    if response.prepared:
        return
    now = time.perf_counter()
    durable = now - durable_from
    own = max(now - request.get(ARRIVED, now) - meter.upstream_s - durable, 0.0)
    ours = f"upstream;dur={meter.upstream_s * 1000:.3f}, durable;dur={durable * 1000:.3f}, gateway;dur={own * 1000:.3f}"
    before = response.headers.get("server-timing")
    response.headers["server-timing"] = f"{before}, {ours}" if before else ours


def route_headers(meter: Meter, dep: Deployment) -> dict[str, str]:
    return {"x-fb-deployment": dep.id, "x-fb-attempts": str(meter.tab.attempts)}
