"""The HTTP side of the steps every model request's handler shares.

The handlers (``chat.py``, ``embeddings.py``) read as the request path; what
they take from the HTTP request for the stages after them lives here:

* ``meter_for``: the request's meter (``proxy.metering.open_meter``), with what the
  caller's headers say (``x-fb-tags``, refused here if bad, before anything is held;
  ``x-fb-max-wait-ms``) and the request's trace; the access line reads it back;
* ``plan``: the ordered chain of candidates (routing; reads the provider-limit mirrors);
* ``route_headers``: what an answer says about where it was served;
* ``input_tokens``: what the token-count endpoints answer (Messages ``count_tokens``, Responses ``input_tokens``).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from proxy.admission.auth import allowed_alias
from proxy.admission.budget_port import max_wait_s
from proxy.admission.plan import chat_input_estimates
from proxy.api.tags import HEADER, parse_tags
from proxy.metering.meter import Meter, open_meter
from proxy.routing.chain import Chain, chain_for
from proxy.routing.router import Needs
from proxy.runtime import Runtime
from proxy.snapshot import Alias, Deployment, KeyRecord, Snapshot


def meter_for(rt: Runtime, snap: Snapshot, request: web.Request, key: KeyRecord, alias: Alias, *,
              run_id: str | None, data_class: str, stream: bool, **tab: Any) -> Meter:
    """The request's meter; ``tab`` passes ``retry_of``, ``privacy`` and ``estimates`` through."""
    meter = open_meter(
        rt, snap, request["request_id"], key, alias, run_id=run_id, data_class=data_class, stream=stream,
        tags=parse_tags(request.headers.get(HEADER)), trace=request.get("trace"),
        max_wait_s=max_wait_s(request.headers.get("x-fb-max-wait-ms"), rt.options.budget_wait_s,
                              rt.options.budget_wait_max_s), **tab)
    request["meter"] = meter  # the access line reads the settled request from it
    return meter


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


def route_headers(meter: Meter, dep: Deployment) -> dict[str, str]:
    return {"x-fb-deployment": dep.id, "x-fb-attempts": str(meter.tab.attempts)}
