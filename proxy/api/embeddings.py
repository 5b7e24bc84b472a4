"""POST /v1/embeddings: the same route / admit / attempt / settle path, no stream."""

from __future__ import annotations

import orjson
from aiohttp import web

from proxy.admission.auth import allowed_alias, data_class
from proxy.admission.gate import admit
from proxy.admission.plan import embeddings_input_estimate
from proxy.api.streaming import ClientWatch
from proxy.api.validate import validate_embeddings
from proxy.body import parse_json_object
from proxy.errors import GatewayError
from proxy.metering import Meter
from proxy.routing.chain import allows_fallback, chain_for, key_deployments, key_regions
from proxy.routing.failover import settled_answer
from proxy.routing.router import Needs
from proxy.runtime import RUNTIME
from proxy.snapshot import Deployment
from proxy.upstream.dialects import get_dialect
from proxy.upstream.relay import Timeouts, forwarded_headers


async def create_embeddings(request: web.Request) -> web.StreamResponse:
    rt = request.app[RUNTIME]
    snap = rt.snapshot
    key = request["key"]
    call = validate_embeddings(parse_json_object(await request.read()))
    alias = allowed_alias(snap, key, call.alias, "embeddings")
    cls = data_class(key, request.headers.get("x-fb-data-class"))
    est_in = embeddings_input_estimate(call.texts)
    needs = Needs((("embeddings", "model"),), cls, est_in, key_regions(key), key_deployments(key))
    chain = await chain_for(rt, snap, alias, needs, None, allows_fallback(request.headers))
    meter = Meter(rt, snap, request["request_id"], key, alias,
                  run_id=request.headers.get("x-fb-run-id"), data_class=cls, stream=False)
    admitted = await admit(rt, snap, meter, chain.deployments, est_in, 0)
    assert rt.upstream is not None
    upstream, timeouts = rt.upstream, Timeouts.of(alias)

    async def attempt(dep: Deployment):
        dialect = get_dialect(dep.dialect)
        req = dialect.embeddings_request(
            call.body, dep, upstream.secret_for(dep), extra_headers=forwarded_headers(dep, request.headers)
        )
        return dialect.parse_embeddings(await upstream.complete(dialect, req, timeouts))

    async def answer() -> web.Response:
        dep, result = await settled_answer(chain.deployments, meter, attempt, max_attempts=chain.max_attempts)
        body = {**result.body, "model": alias.name, "usage": {
            "prompt_tokens": result.usage.prompt_tokens, "total_tokens": result.usage.prompt_tokens,
        }}
        headers = {**admitted.headers, "x-fb-deployment": dep.id, "x-fb-attempts": str(meter.attempts)}
        return web.Response(body=orjson.dumps(body), content_type="application/json", headers=headers)

    with ClientWatch(request, rt) as watch:
        try:
            return await watch.run(answer())
        except GatewayError as exc:
            exc.headers["x-fb-attempts"] = str(meter.attempts)
            raise
