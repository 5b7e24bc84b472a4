"""POST /v1/embeddings: the same admit / route / attempt / settle path, no stream."""

from __future__ import annotations

import orjson
from aiohttp import web

from proxy.admission.auth import allowed_alias, data_class
from proxy.admission.gate import admit
from proxy.admission.plan import embeddings_input_estimate
from proxy.api.validate import parse_json_object, validate_embeddings
from proxy.control.snapshot import Deployment
from proxy.metering import Meter
from proxy.routing.failover import settled_answer
from proxy.routing.router import Needs, candidates
from proxy.runtime import RUNTIME
from proxy.upstream.dialects import get_dialect
from proxy.upstream.relay import Timeouts, forwarded_headers


async def create_embeddings(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    snap = rt.snapshot
    key = request["key"]
    call = validate_embeddings(parse_json_object(await request.read()))
    alias = allowed_alias(snap, key, call.alias, "embeddings")
    cls = data_class(key, request.headers.get("x-fb-data-class"))
    est_in = embeddings_input_estimate(call.texts)
    cands = candidates(snap, alias, Needs((("embeddings", "model"),), cls, est_in), rt.rng)
    meter = Meter(rt, snap, request["request_id"], key, alias,
                  run_id=request.headers.get("x-fb-run-id"), data_class=cls, stream=False)
    admitted = await admit(rt, snap, meter, cands, est_in, 0)
    assert rt.upstream is not None
    upstream, timeouts = rt.upstream, Timeouts.of(alias)

    async def attempt(dep: Deployment):
        dialect = get_dialect(dep.dialect)
        req = dialect.embeddings_request(
            call.body, dep, upstream.secret_for(dep), extra_headers=forwarded_headers(dep, request.headers)
        )
        return dialect.parse_embeddings(await upstream.complete(dialect, req, timeouts))

    dep, result = await settled_answer(cands, meter, attempt)
    body = {**result.body, "model": alias.name, "usage": {
        "prompt_tokens": result.usage.prompt_tokens, "total_tokens": result.usage.prompt_tokens,
    }}
    headers = {**admitted.headers, "x-fb-deployment": dep.id, "x-fb-attempts": str(meter.attempts)}
    return web.Response(body=orjson.dumps(body), content_type="application/json", headers=headers)
