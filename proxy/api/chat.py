"""POST /v1/chat/completions: admit, route, relay, settle.

The handler reads top to bottom as the request path in ARCHITECTURE.md:
authenticate (middleware), classify, estimate, route, admit, attempt,
settle. Streaming relay lives in ``proxy/upstream/streaming.py``; the order of
candidates in ``proxy/routing/``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable

import orjson
from aiohttp import web

from ledger.usage import TokenUsage
from pricing.tokens import estimate_tokens
from proxy.admission.admit import admit, tries
from proxy.admission.auth import allowed_alias
from proxy.admission.plan import chat_input_estimates, output_cap
from proxy.api.steps import meter_for, outbound, plan, route_headers, server_timing, variant_of
from proxy.api.surface import CHAT, Surface
from proxy.api.validate import ChatCall, validate_chat
from proxy.api.watch import ClientWatch
from proxy.body import parse_json_object
from proxy.cache import serving as cached
from proxy.errors import GatewayError, UnsupportedParameter
from proxy.idempotency import shell as idempotent
from proxy.limits.draws import refund
from proxy.metering.meter import Meter
from proxy.metering.settlement import scopes_of
from proxy.outcomes import DRAIN
from proxy.privacy.classify import Classified, classify_chat, routed
from proxy.privacy.redact import restore_chat_response
from proxy.routing.answer import first_stream, settled_answer
from proxy.routing.chain import Chain, allows_fallback, key_deployments, key_regions
from proxy.routing.router import chat_needs, sticky_key
from proxy.runtime import RUNTIME, Runtime
from proxy.snapshot import Alias, Deployment, KeyRecord, Snapshot
from proxy.upstream import streaming
from proxy.upstream.base import Dialect
from proxy.upstream.dialects import get_dialect
from proxy.upstream.relay import Timeouts, forwarded_headers, parsed
from proxy.upstream.usage_check import estimated_as, needs_estimate, served_tier, within


async def chat_completions(request: web.Request) -> web.StreamResponse:
    call = validate_chat(parse_json_object(await request.read()))
    return await serve(request, call, call.body, CHAT)


async def serve(request: web.Request, call: ChatCall, sent: dict, surface: Surface) -> web.StreamResponse:
    """One chat request on any client surface: ``sent`` is the body as the client sent it (for
    ``Idempotency-Key``), ``call`` the chat request it asks for, ``surface`` how the answer is written."""
    rt = request.app[RUNTIME]
    idem = await idempotent.begin(rt, request, sent, call.stream)  # first: a replay is neither routed nor billed
    if idem.replay is not None:
        return idem.replay
    response: web.StreamResponse | None = None
    try:
        response = await _serve(request, rt, call, idem.retry_of, surface)
        if response.status == 200 and (leg := request.get("shadow_leg")) is not None:  # after the answer, never before
            rt.pod.send_shadow(leg[0], orjson.dumps(shadow_body(call.body, leg[1])), leg[2])
        return response
    finally:
        if idem.slot is not None:  # without a pending claim finish() is a no-op: no task for it
            await asyncio.shield(idempotent.finish(rt, idem, response if isinstance(response, web.Response) else None))


def shadow_body(body: dict, candidate: str) -> dict:
    """A shadow leg's request: the caller's chat request, to the candidate alias, answered whole."""
    leg = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    leg["model"] = candidate
    return leg


async def _serve(request: web.Request, rt: Runtime, call: ChatCall, retry_of: str | None,
                 surface: Surface) -> web.StreamResponse:
    snap = rt.pod.snapshot  # one snapshot for the whole request, even if a swap happens meanwhile
    key = request["key"]
    alias = allowed_alias(snap, key, call.alias, "chat")
    run_id = request.headers.get("x-fb-run-id")
    downgraded_from = None
    downgraded = _downgrade(rt, snap, key, alias, run_id)
    if downgraded is not None:
        alias, downgraded_from = downgraded, alias.name
    privacy = classify_chat(snap.privacy, key, request.headers.get("x-fb-data-class"), call.body)
    param = call.max_output_param or (
        "max_completion_tokens" if call.body.get("max_completion_tokens") is not None else "max_tokens")
    asked, alias = alias, variant_of(request, snap, key, alias, call.body)  # a split's variant serves it
    shadow = asked.shadow
    if (shadow is not None and "shadow_of" not in request and request.get("batch_id") is None
            and rt.rng.random() * 100 < shadow.pct):  # copied to the candidate once answered, classified as this
        request["shadow_leg"] = (asked.name, shadow.alias, privacy.data_class)
    max_out = output_cap(alias, call.requested_max_output, param)
    alias_deps = [snap.deployments[d] for d in alias.deployments]
    estimates = chat_input_estimates(rt.estimator, call.body, key.key_id, alias_deps)
    est_in = max(e.tokens for e in estimates.values())
    needs = chat_needs(call.body, privacy.data_class, est_in + max_out, key_regions(key), key_deployments(key),
                       outside_class=privacy.outside_class, outside_refused=privacy.outside_class is None,
                       team=key.team)
    chain = await routed(privacy, plan(rt, snap, alias, needs, sticky_key(request.headers.get("x-fb-session"), call.body),
                                       allows_fallback(request.headers)))
    native = _passthrough(surface, privacy)
    cands, cleared = await outbound(rt, request, snap, alias, alias_deps,
                                    honouring(chain.deployments, call.body, native, call.native_only), est_in, max_out,
                                    call.body)
    cache = cached.for_chat(rt, request, alias, privacy, call.body, cands, max_out, call.stream)
    meter = meter_for(rt, snap, request, key, asked, run_id=run_id, data_class=privacy.data_class, stream=call.stream,
                      api=surface.name,
                      retry_of=retry_of, privacy=privacy.audit(snap.privacy, cands[0], call.body.get("messages")),
                      estimates=estimates)
    if cleared:
        meter.dep_draws[cands[0].id] = cleared  # a batch request's outbound, taken before admission
    try:
        admitted = await admit(rt, meter, cands, est_in, max_out, served_tier(call.body.get("service_tier")))
    except GatewayError:
        rt.limit_settler.adjust(refund(cleared))  # refused: the outbound it took goes back
        raise
    if downgraded_from is not None:
        admitted.headers["x-fb-downgraded-from"] = downgraded_from
    admitted.headers.update(cached.headers_of(cache))
    with ClientWatch(request, rt.pod) as watch:
        try:
            async with cached.serving(rt, cache, meter) as hit:
                if hit is not None:
                    encoder = surface.encoder(meter.tab.request_id, int(rt.clock()), asked.name, None)
                    response = await cached.answer_chat(request, rt, meter, hit, stream=call.stream,
                                                        include_usage=call.include_usage, headers=admitted.headers,
                                                        render=surface.render, encoder=encoder)
                elif call.stream:  # the relay writes the stream's end after the settlement is durable
                    return await watch.run(_stream(request, rt, call, cands, chain, meter, admitted.headers, watch,
                                                   privacy, cache, surface, native))
                else:
                    response = await watch.run(_complete(request, rt, call, cands, chain, meter, admitted.headers,
                                                         privacy, cache, surface, native))
        except GatewayError as exc:
            exc.headers["x-fb-attempts"] = str(meter.tab.attempts)
            await meter.durable()
            raise
    if surface.settled is not None:  # what the surface keeps, handed to its store (written behind the answer)
        await surface.settled()
    waited = time.perf_counter()
    await meter.durable()  # a non-stream answer's bytes go out once its settlement is durable
    server_timing(response, request, meter, waited)
    return response


def _downgrade(rt: Runtime, snap: Snapshot, key: KeyRecord, alias: Alias, run_id: str | None) -> Alias | None:
    """Past a soft threshold with ``downgrade_alias`` set, the cheaper chat alias to serve instead."""
    target = rt.budgets.downgrade_target(snap, scopes_of(key, run_id), rt.clock())
    if target is None or target == alias.name:
        return None
    cheaper = snap.aliases.get(target)
    return cheaper if cheaper is not None and cheaper.kind == "chat" else None


def _passthrough(surface: Surface, privacy: Classified) -> Callable[[Deployment], Dialect | None]:
    """The attempt's native dialect for a deployment that speaks the surface's API, with the privacy policy's
    placeholders when it redacts for that deployment (``proxy.api.surface.Passthrough``); None: translated."""
    passthrough = surface.passthrough
    if passthrough is None:
        return lambda dep: None
    made: dict[str, Dialect | None] = {}  # one per deployment: routing, the attempt and the relay ask alike

    def native(dep: Deployment) -> Dialect | None:
        if dep.id not in made:
            redacts = privacy.redacts(dep)
            made[dep.id] = passthrough.make(privacy.redaction if redacts else None) \
                if passthrough.serves(dep, redacts) else None
        return made[dep.id]

    return native


def honouring(cands: list[Deployment], body: dict,
              native: Callable[[Deployment], Dialect | None] = lambda dep: None,
              native_only: tuple[tuple[str, str], ...] = ()) -> list[Deployment]:
    """Candidates whose dialect can honour every parameter (a passed-through request: its provider checks it;
    ``native_only``: what only a passed-through request carries); else a 400 naming one."""
    kept: list[Deployment] = []
    first_error: UnsupportedParameter | None = None
    for dep in cands:
        if native(dep) is not None:
            kept.append(dep)
            continue
        try:
            if native_only:
                param, what = native_only[0]
                raise UnsupportedParameter(param, dep.id, f"{what} needs a deployment that serves this API itself")
            get_dialect(dep.dialect).validate(body, dep)
        except UnsupportedParameter as exc:
            first_error = first_error or exc
            continue
        kept.append(dep)
    if not kept:
        assert first_error is not None
        raise first_error
    return kept


async def _stream(
    request: web.Request, rt: Runtime, call: ChatCall, cands: list[Deployment], chain: Chain, meter: Meter,
    headers: dict[str, str], watch: ClientWatch, privacy: Classified, cache: cached.CacheStep, surface: Surface,
    native: Callable[[Deployment], Dialect | None],
) -> web.StreamResponse:
    """Routing opens the stream (failover before the first byte); the relay sends it and settles the request."""
    assert meter.tab.plan is not None
    attempt = streaming.opener(rt.upstream, Timeouts.of(chain.alias), lambda dep: privacy.body_for(dep, call.body),
                               request.headers, meter.tab.plan.max_output_tokens, dialect_for=native)
    dep, stream, started = await first_stream(meter, cands, chain, tries(rt, meter), attempt,
                                              lambda: 503 if watch.fired == DRAIN else 499)
    state, created = rt.routing, int(rt.clock())
    if surface.passthrough is not None and native(dep) is not None:
        encoder = surface.passthrough.encoder(stream.translator, meter.tab.request_id, meter.tab.alias.name, cache.capture,
                                              privacy.redaction if privacy.redacts(dep) else None)
    else:
        encoder = surface.encoder(meter.tab.request_id, created, meter.tab.alias.name, cache.capture)
    return await streaming.relay(
        request, meter, dep, stream, started, alias=meter.tab.alias.name, created=created,
        include_usage=call.include_usage, headers=headers, watch=watch,
        finish=lambda d, outcome: state.finish(d, outcome, state.clock()),
        restorer=privacy.restorer_for(dep), tap=cache.capture, encoder=encoder)


async def _complete(
    request: web.Request, rt: Runtime, call: ChatCall, cands: list[Deployment], chain: Chain, meter: Meter,
    headers: dict[str, str], privacy: Classified, cache: cached.CacheStep, surface: Surface,
    native: Callable[[Deployment], Dialect | None],
) -> web.Response:
    assert meter.tab.plan is not None
    upstream, timeouts = rt.upstream, Timeouts.of(chain.alias)
    est_in, max_out = meter.tab.plan.est_input_tokens, meter.tab.plan.max_output_tokens

    async def attempt(dep: Deployment):
        dialect = native(dep) or get_dialect(dep.dialect)
        req = dialect.chat_request(
            privacy.body_for(dep, call.body), dep, await upstream.credential(dep), max_output_tokens=max_out,
            extra_headers=forwarded_headers(dep, request.headers),
        )
        result = parsed(dialect.parse_chat, await upstream.complete(dialect, req, timeouts, dep))
        if privacy.redacts(dep):  # (a passed-through answer's own body is restored by its dialect)
            assert privacy.redaction is not None
            restore_chat_response(result.body, privacy.redaction)
        result.usage = within(result.usage, dep.context_window + max_out)
        if needs_estimate(result.usage):
            result.usage = _estimated(result.body, est_in, result.usage)
        return result

    dep, result = await settled_answer(meter, cands, chain, tries(rt, meter), attempt)
    cache.keep(dep, result.body, result.usage)
    body = {
        "id": f"chatcmpl-{meter.tab.request_id}",
        "object": "chat.completion",
        "created": int(rt.clock()),
        "model": meter.tab.alias.name,
        **result.body,
        "usage": result.usage.to_openai(),
        "x_farebox": meter.x_farebox(dep),
    }
    if result.native is not None and surface.passthrough is not None:  # the provider's own answer, kept
        rendered = surface.passthrough.render(result.native, result.usage, meter.tab.request_id, meter.tab.alias.name,
                                              body["x_farebox"])
    else:
        rendered = surface.render(body, result.usage, meter.tab.request_id, meter.tab.alias.name)
    return web.Response(
        body=orjson.dumps(rendered), content_type="application/json", headers={**headers, **route_headers(meter, dep)}
    )


def _estimated(body: dict, est_input: int, reported: TokenUsage) -> TokenUsage:
    """The provider sent no usage, or usage that failed the boundary: bill our estimate, marked as such."""
    chars = 0
    for choice in body.get("choices") or ():
        msg = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(msg, dict):
            continue
        content = msg.get("content")
        chars += len(content) if isinstance(content, str) else 0
        for call in msg.get("tool_calls") or ():
            arguments = (call.get("function") or {}).get("arguments") if isinstance(call, dict) else None
            chars += len(arguments) if isinstance(arguments, str) else 0
    return estimated_as(reported, input_tokens=est_input, output_tokens=estimate_tokens(chars))
