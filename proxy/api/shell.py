"""The steps every model request's handler shares: open its meter, plan its chain, run it, settle.

The handlers (``chat.py``, ``embeddings.py``, ``streaming.py``) read as the
request path; what they do to the ports lives here and in ``admit.py``:

* ``open_meter``: the request's tab (who, which alias, which scopes, cost centre and tags) and its metering shell;
* ``plan``: the ordered chain of candidates (routing; reads the provider-limit mirrors);
* ``tries``: what the attempt loop needs from this request (its meter, the
  admission step ``clear_deployment``, the routing state);
* ``settled_answer``: a non-streaming answer, metered and settled whatever happens.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Awaitable, Callable, Sequence

from aiohttp import web

from proxy.admission.budget_port import max_wait_s
from proxy.api.admit import clear_deployment
from proxy.api.tags import HEADER, parse_tags
from proxy.errors import GatewayError
from proxy.metering import Meter
from proxy.routing.chain import Chain, chain_for
from proxy.routing.failover import Tries, first_answer
from proxy.routing.router import Needs
from proxy.runtime import Runtime
from proxy.settlement import Tab, scopes_of
from proxy.snapshot import Alias, Deployment, KeyRecord, Snapshot
from proxy.upstream.base import ChatResult


def open_meter(rt: Runtime, snap: Snapshot, request: web.Request, key: KeyRecord, alias: Alias, *,
               run_id: str | None, data_class: str, stream: bool) -> Meter:
    """The request's tab; a bad ``x-fb-tags`` header is refused here, before anything is held."""
    tab = Tab(snap, request["request_id"], key, alias, run_id, data_class, stream, scopes_of(key, run_id),
              cost_centre=snap.cost_centre_of(key.team, key.app), tags=parse_tags(request.headers.get(HEADER)))
    meter = Meter(rt, tab)
    request["meter"] = meter  # the access line reads the settled request from it
    meter.trace = request.get("trace")  # proxy.tracing.RequestTrace, when tracing is on
    meter.max_wait_s = max_wait_s(request.headers.get("x-fb-max-wait-ms"), rt.options.budget_wait_s,
                                  rt.options.budget_wait_max_s)
    return meter


async def plan(rt: Runtime, snap: Snapshot, alias: Alias, needs: Needs, sticky: str | None,
               allow_fallback: bool) -> Chain:
    return await chain_for(rt.limits, rt.routing, rt.rng, rt.now_us(), snap, alias, needs, sticky, allow_fallback)


def tries(rt: Runtime, meter: Meter) -> Tries:
    """After admission: the attempt loop's view of this request."""
    assert meter.tab.plan is not None
    return Tries(meter, functools.partial(clear_deployment, rt, meter), rt.routing, rt.rng,
                 meter.tab.plan.est_input_tokens)


async def settled_answer(
    rt: Runtime, meter: Meter, cands: Sequence[Deployment], chain: Chain,
    attempt: Callable[[Deployment], Awaitable[ChatResult]],
) -> tuple[Deployment, ChatResult]:
    """A non-streaming answer, metered and settled whatever happens (499 if the caller left)."""
    dep: Deployment | None = None
    status = 500
    try:
        dep, result, started = await first_answer(cands, chain, tries(rt, meter), attempt, streaming=False)
        meter.attempted(dep, started=started, usage=result.usage)
        status = 200
        return dep, result
    except GatewayError as exc:
        status = exc.status
        raise
    except asyncio.CancelledError:
        status = 499
        raise
    finally:
        meter.settle(status, dep)


def route_headers(meter: Meter, dep: Deployment) -> dict[str, str]:
    return {"x-fb-deployment": dep.id, "x-fb-attempts": str(meter.tab.attempts)}
