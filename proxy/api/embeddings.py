"""POST /v1/embeddings: the same route / admit / attempt / settle path, no stream.

An ``Idempotency-Key`` is claimed before anything is routed or admitted, as for
chat (``proxy.idempotency.shell``): a repeat gets the stored answer, billed once.
"""

from __future__ import annotations

import asyncio

import orjson
from aiohttp import web

from proxy.admission.admit import admit, tries
from proxy.admission.auth import allowed_alias
from proxy.admission.plan import embeddings_input_estimate
from proxy.api.steps import meter_for, outbound, plan, route_headers
from proxy.api.validate import EmbeddingsCall, validate_embeddings
from proxy.api.watch import ClientWatch
from proxy.body import parse_json_object
from proxy.cache import serving as cached
from proxy.errors import GatewayError
from proxy.idempotency import shell as idempotent
from proxy.limits.draws import refund
from proxy.privacy.classify import classify_texts, routed
from proxy.routing.answer import settled_answer
from proxy.routing.chain import allows_fallback, key_deployments, key_regions
from proxy.routing.router import Needs
from proxy.runtime import RUNTIME, Runtime
from proxy.snapshot import Deployment
from proxy.upstream.dialects import get_dialect
from proxy.upstream.relay import Timeouts, forwarded_headers, parsed
from proxy.upstream.usage_check import estimated_as, needs_estimate, within


async def create_embeddings(request: web.Request) -> web.StreamResponse:
    rt = request.app[RUNTIME]
    call = validate_embeddings(parse_json_object(await request.read()))
    idem = await idempotent.begin(rt, request, call.body, stream=False)  # first: a replay is neither routed nor billed
    if idem.replay is not None:
        return idem.replay
    response: web.StreamResponse | None = None
    try:
        response = await _serve(request, rt, call)
        return response
    finally:
        await asyncio.shield(idempotent.finish(rt, idem, response if isinstance(response, web.Response) else None))


async def _serve(request: web.Request, rt: Runtime, call: EmbeddingsCall) -> web.StreamResponse:
    snap = rt.pod.snapshot
    key = request["key"]
    alias = allowed_alias(snap, key, call.alias, "embeddings")
    privacy = classify_texts(snap.privacy, key, request.headers.get("x-fb-data-class"), call.texts)
    est_in = embeddings_input_estimate(call.texts)
    needs = Needs((("embeddings", "model"),), privacy.data_class, est_in, key_regions(key), key_deployments(key),
                  outside_class=privacy.outside_class, outside_refused=privacy.outside_class is None, team=key.team)
    chain = await routed(privacy, plan(rt, snap, alias, needs, None, allows_fallback(request.headers)))
    cands, cleared = await outbound(rt, request, snap, alias, [snap.deployments[d] for d in alias.deployments],
                                    chain.deployments, est_in, 0)
    cache = cached.for_embeddings(rt, request, alias, privacy, call.body, cands)
    meter = meter_for(rt, snap, request, key, alias, run_id=request.headers.get("x-fb-run-id"), api="embeddings",
                      data_class=privacy.data_class, stream=False,
                      privacy=privacy.audit(snap.privacy, cands[0], call.body.get("input")))
    if cleared:
        meter.dep_draws[cands[0].id] = cleared  # a batch request's outbound, taken before admission
    try:
        admitted = await admit(rt, meter, cands, est_in, 0)
    except GatewayError:
        rt.limit_settler.adjust(refund(cleared))  # refused: the outbound it took goes back
        raise
    admitted.headers.update(cached.headers_of(cache))
    upstream, timeouts = rt.upstream, Timeouts.of(alias)

    async def attempt(dep: Deployment):
        dialect = get_dialect(dep.dialect)
        req = dialect.embeddings_request(
            call.body, dep, await upstream.credential(dep), extra_headers=forwarded_headers(dep, request.headers)
        )
        result = parsed(dialect.parse_embeddings, await upstream.complete(dialect, req, timeouts, dep))
        result.usage = within(result.usage, dep.context_window)
        if needs_estimate(result.usage):
            result.usage = estimated_as(result.usage, input_tokens=est_in, output_tokens=0)
        return result

    async def answer() -> web.Response:
        dep, result = await settled_answer(meter, cands, chain, tries(rt, meter), attempt)
        cache.keep(dep, result.body, result.usage)
        body = {**result.body, "model": alias.name, "usage": {
            "prompt_tokens": result.usage.prompt_tokens, "total_tokens": result.usage.prompt_tokens,
        }, "x_farebox": meter.x_farebox(dep)}
        headers = {**admitted.headers, **route_headers(meter, dep)}
        return web.Response(body=orjson.dumps(body), content_type="application/json", headers=headers)

    with ClientWatch(request, rt.pod) as watch:
        try:
            async with cached.serving(rt, cache, meter) as hit:
                if hit is not None:
                    response = cached.answer_embeddings(rt, meter, hit, admitted.headers)
                else:
                    response = await watch.run(answer())
        except GatewayError as exc:
            exc.headers["x-fb-attempts"] = str(meter.tab.attempts)
            await meter.durable()
            raise
    await meter.durable()  # the answer's bytes go out once its settlement is durable
    return response
