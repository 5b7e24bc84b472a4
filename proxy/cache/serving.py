"""The exact response cache's hook into the request path: decide, look up or lead, answer a hit, store.

How a handler uses it (``chat.py``, ``embeddings.py``), in request order:

1. ``for_chat`` / ``for_embeddings`` before admission: the decision
   (``proxy.cache.policy``; a malformed ``x-fb-cache`` is a 400 before any
   hold) and the keys, one per distinct model of the candidates in routing
   order (any of them may answer for the alias; the first stored wins);
2. after admission, ``async with serving(rt, step, meter) as hit``: a
   stored entry, or the entry an identical request in flight on this pod
   fetched (``Flights``), else None and this request leads: it goes upstream
   and hands its answer to ``step.keep`` (non-stream) or ``step.capture``
   (stream chunks); leaving the block stores the entry and lands the flight;
3. a hit is answered by ``answer_chat`` / ``answer_embeddings``: settled at
   once (hold released, cost 0, ``cache_hit`` and ``cache_saved_micro`` in
   ``request.settled``), ``x-fb-cache: hit``, a stream replayed as SSE.

An alias with ``cache.semantic`` adds a step between the exact lookup and the
flight (``proxy.cache.semantic``): the last user turn is embedded and searched
by meaning; a hit there is answered the same way, with
``x-fb-cache-kind: semantic`` and its similarity. An alias with only a
semantic cache uses the exact one too (it is free and comes first).

Misses answer ``x-fb-cache: miss``; a request that asked for the cache where
it may not be used answers ``x-fb-cache: bypass`` and ``x-fb-cache-reason``.

The same step hands a fetched answer to the team's body log when the team
opted in (``Team.body_log``): the caller's request body and the answer it
got, queued for sealing (``proxy.bodylog``). Hits and failed requests are not
logged (a hit's answer is the logged answer of the request that fetched it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Protocol

import aiohttp
import orjson
from aiohttp import web

from ledger.usage import TokenUsage
from proxy.bodylog import BodyLog
from proxy.cache import semantic
from proxy.cache.entry import Entry, StreamCapture, chat_entry, replay_chunks
from proxy.cache.flights import Flights
from proxy.cache.policy import HEADER, CacheUse, cache_use, chat_key, embeddings_key
from proxy.cache.port import CachePort
from proxy.metering.meter import Meter
from proxy.metering.settlement import cost_of
from proxy.snapshot import Alias, Deployment

log = logging.getLogger("farebox.proxy")


class CacheOptions(Protocol):
    @property
    def cache_max_temperature(self) -> float: ...
    @property
    def cache_max_entry_bytes(self) -> int: ...
    @property
    def cache_ttl_s(self) -> int: ...
    @property
    def budget_wait_s(self) -> float: ...
    @property
    def pod_id(self) -> str: ...
    @property
    def hold_ttl_s(self) -> int: ...


class ServingPorts(semantic.SemanticPorts, Protocol):
    """What the response caches read and write through: the pod's runtime (``proxy.runtime.Runtime``)."""

    @property
    def cache(self) -> CachePort: ...
    @property
    def flights(self) -> Flights: ...
    @property
    def body_log(self) -> BodyLog | None: ...
    @property
    def options(self) -> CacheOptions: ...


@dataclass(slots=True)
class CacheStep:
    """One request's use of the cache (and of the team's body log): decision, keys, the answer it fetched."""

    use: CacheUse
    kind: str = "chat"
    team: str = ""
    key: str = ""  # the first candidate's model's: identical requests share a flight under it
    lookups: tuple[str, ...] = ()  # every candidate model's key, in routing order
    max_output_tokens: int = 0
    body: Mapping[str, Any] = field(default_factory=dict)
    log_bodies: bool = False  # the team keeps its bodies (encrypted): the answer goes to ``rt.body_log``
    capture: StreamCapture | None = None  # a fetched stream's chunks, as relayed
    answer: tuple[Deployment, Mapping[str, Any], TokenUsage] | None = None  # a fetched answer (200 only)
    semantic: semantic.SemanticStep | None = None  # the alias's semantic cache, when this request may use it

    def keep(self, dep: Deployment, body: Mapping[str, Any], usage: TokenUsage) -> None:
        """The upstream answer of a request that fetched one (only a 200 reaches here)."""
        if self.use.write or self.log_bodies:
            self.answer = (dep, body, usage)

    def key_for(self, model: str) -> str:
        """The key of this request's answer from ``model`` (stored under the model that answered)."""
        if self.kind == "chat":
            return chat_key(self.team, model, self.body, self.max_output_tokens)
        return embeddings_key(self.team, model, self.body)

    def entry(self, meter: Meter) -> Entry | None:
        """The fetched answer as a cache entry; None when there is none or it must not be stored."""
        if self.answer is None or not self.use.write:
            return None
        dep, body, usage = self.answer
        currency = meter.tab.snapshot.currency
        if self.kind == "chat":
            return chat_entry(body, usage, dep.id, meter.tab.total_cost, currency)
        return Entry("embeddings", {k: v for k, v in body.items() if k in ("object", "data")}, usage, dep.id,
                     meter.tab.total_cost, currency)


def _step(rt: ServingPorts, request: web.Request, alias: Alias, privacy: semantic.Classification, kind: str, body: Mapping[str, Any],
          cands: Sequence[Deployment], max_output_tokens: int) -> CacheStep:
    use = cache_use(alias_on=alias.cache or alias.semantic is not None, header=request.headers.get(HEADER),
                    control=request.headers.get("Cache-Control"), kind=kind, body=body,
                    data_class=privacy.data_class, redacted=privacy.redaction is not None,
                    max_temperature=rt.options.cache_max_temperature)
    team = request["key"].team
    owner = rt.snapshot.teams.get(team)
    log_bodies = rt.body_log is not None and owner is not None and owner.body_log
    if not (use.read or use.write or log_bodies):
        return CacheStep(use)
    step = CacheStep(use, kind, team, max_output_tokens=max_output_tokens, body=body, log_bodies=log_bodies)
    if use.read or use.write:
        step.lookups = tuple(step.key_for(m) for m in dict.fromkeys(d.model for d in cands))
        step.key = step.lookups[0]
        if kind == "chat":
            step.semantic = semantic.for_step(alias, use, body, cands, privacy)
    return step


def for_chat(rt: ServingPorts, request: web.Request, alias: Alias, privacy: semantic.Classification, body: Mapping[str, Any],
             cands: Sequence[Deployment], max_output_tokens: int, stream: bool) -> CacheStep:
    step = _step(rt, request, alias, privacy, "chat", body, cands, max_output_tokens)
    if stream and (step.use.write or step.log_bodies):
        step.capture = StreamCapture()
    return step


def for_embeddings(rt: ServingPorts, request: web.Request, alias: Alias, privacy: semantic.Classification, body: Mapping[str, Any],
                   cands: Sequence[Deployment]) -> CacheStep:
    return _step(rt, request, alias, privacy, "embeddings", body, cands, 0)


def headers_of(step: CacheStep) -> dict[str, str]:
    """The cache headers of a request that did not hit."""
    if not step.use.asked:
        return {}
    if step.use.bypass is not None:
        return {HEADER: "bypass", "x-fb-cache-reason": step.use.bypass}
    return {HEADER: "miss"}


@asynccontextmanager
async def serving(rt: ServingPorts, step: CacheStep, meter: Meter) -> AsyncIterator[Entry | None]:
    """The entry to answer with, or None: then this request fetches, and on leaving its answer is stored
    (and logged, when its team keeps bodies).

    The request is admitted before this and settled by whoever answers it; if it ends while still
    looking up or waiting for the flight it leads nothing and is settled here (499 when its caller left).
    """
    flight = None
    try:
        hit = await _stored(rt, step)
        if hit is None and step.semantic is not None:
            hit = await semantic.lookup(rt, step.semantic, meter, step.body, step.max_output_tokens)
        if hit is None and step.use.write:
            flight = await rt.flights.join(step.key)
            if not flight.leader and flight.entry is not None and step.use.read:
                hit = _loaded(flight.entry)
    except BaseException as exc:
        meter.settle(499 if isinstance(exc, asyncio.CancelledError) else 500, None)
        raise
    if hit is not None:
        yield hit
        return
    landed = None
    try:
        yield None
        entry = _finish(rt, step, meter)
        if entry is not None and step.use.write:
            landed = entry.dumps()
    finally:
        if flight is not None:
            rt.flights.land(flight, landed)  # None (an error, the caller left): followers fetch themselves
    if landed is not None and len(landed) <= rt.options.cache_max_entry_bytes:
        assert step.answer is not None
        model = step.answer[0].model  # failover: the model that answered
        await rt.cache.put(step.key_for(model), landed, rt.options.cache_ttl_s)
        if step.semantic is not None:
            await semantic.store(rt, step.semantic, step.team, model, step.body, step.max_output_tokens, landed)


async def _stored(rt: ServingPorts, step: CacheStep) -> Entry | None:
    """The first stored entry under the candidates' keys, if reading is allowed."""
    if not step.use.read:
        return None
    for key in step.lookups:
        raw = await rt.cache.get(key)
        if raw is not None and (entry := _loaded(raw)) is not None:
            return entry
    return None


def _loaded(raw: bytes) -> Entry | None:
    """An entry's bytes, or None when they do not read as one (a miss, logged)."""
    try:
        return Entry.loads(raw)
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("unreadable response cache entry skipped: %s", type(exc).__name__)
        return None


def _finish(rt: ServingPorts, step: CacheStep, meter: Meter) -> Entry | None:
    """After a fetch: the stream's answer assembled, the bodies logged, the entry to store."""
    if step.capture is not None:
        _keep_stream(step, meter)
    if step.log_bodies and step.answer is not None and rt.body_log is not None:
        rt.body_log.record(step.team, meter.tab.request_id, step.body, step.answer[1])
    return step.entry(meter)


def _keep_stream(step: CacheStep, meter: Meter) -> None:
    """A fetched stream that finished every choice, served by the last attempt, becomes the answer."""
    assert step.capture is not None
    body, tab = step.capture.body(), meter.tab
    step.capture = None
    last = tab.path[-1] if tab.path else None
    if body is None or last is None or last["outcome"] != "ok":
        return
    dep = tab.snapshot.deployments.get(last["deployment"])
    if dep is not None:
        step.keep(dep, body, tab.total_usage)


def saved_micro(meter: Meter, entry: Entry, now: datetime) -> int:
    """What the entry's answer would cost now at its deployment's price; else what it cost, in our currency."""
    tab = meter.tab
    assert tab.plan is not None
    dep = tab.snapshot.deployments.get(entry.deployment)
    if dep is not None:
        try:
            return cost_of(tab.snapshot, tab.plan.price_version, dep, entry.usage, now)
        except LookupError:
            pass
    return entry.cost_micro if entry.currency == tab.snapshot.currency else 0


def _settle_hit(rt: ServingPorts, meter: Meter, entry: Entry) -> dict[str, Any]:
    """Settle a hit at once (hold released, cost 0); returns the answer's ``x_farebox`` block."""
    tab = meter.tab
    tab.cache_hit = True
    tab.cache_kind = tab.cache_kind or "exact"
    tab.cache_saved_micro = saved_micro(meter, entry, datetime.fromtimestamp(rt.clock(), timezone.utc))
    meter.settle(200, tab.snapshot.deployments.get(entry.deployment))
    return {"request_id": tab.request_id, "deployment": entry.deployment, "attempts": 0, "cost": "0",
            "cost_micro": 0, "currency": tab.snapshot.currency,
            "price_version": tab.plan.price_version if tab.plan else None, "cache": "hit",
            "cache_kind": tab.cache_kind, **({"cache_similarity": tab.cache_similarity} if tab.cache_similarity else {}),
            "cache_saved_micro": tab.cache_saved_micro, "path": []}


def _hit_headers(meter: Meter, entry: Entry, headers: Mapping[str, str]) -> dict[str, str]:
    tab = meter.tab
    out = {**headers, HEADER: "hit", f"{HEADER}-kind": tab.cache_kind or "exact", "x-fb-deployment": entry.deployment,
           "x-fb-attempts": "0"}
    if tab.cache_similarity is not None:
        out[f"{HEADER}-similarity"] = tab.cache_similarity
    return out


class HitEncoder(Protocol):
    """The client surface's stream encoder (``proxy.upstream.streaming.Encoder``)."""

    def encode(self, chunks: Any) -> bytes: ...

    def tail(self, usage: Any, x_farebox: dict, include_usage: bool) -> bytes: ...

    async def settled(self) -> None: ...


async def answer_chat(request: web.Request, rt: ServingPorts, meter: Meter, entry: Entry, *, stream: bool,
                      include_usage: bool, headers: Mapping[str, str],
                      render: Callable[[dict, Any, str, str], dict], encoder: HitEncoder) -> web.StreamResponse:
    """A chat hit, as a completion or replayed as an SSE stream, written by the client surface's ``render`` and
    ``encoder`` (``proxy.api.surface``)."""
    tab = meter.tab
    x_farebox = _settle_hit(rt, meter, entry)
    head = {"id": f"chatcmpl-{tab.request_id}", "created": int(rt.clock()), "model": tab.alias.name}
    if not stream:
        body = {**head, "object": "chat.completion", **entry.body, "usage": entry.usage.to_openai(),
                "x_farebox": x_farebox}
        body = render(body, entry.usage, tab.request_id, tab.alias.name)
        return web.Response(body=orjson.dumps(body), content_type="application/json",
                            headers=_hit_headers(meter, entry, headers))
    resp = web.StreamResponse(status=200, headers={
        **_hit_headers(meter, entry, headers), "Content-Type": "text/event-stream", "Cache-Control": "no-cache",
        "x-request-id": request["client_request_id"] or tab.request_id, "x-fb-request-id": tab.request_id})
    data = encoder.encode(replay_chunks(entry)) + encoder.tail(entry.usage, x_farebox, include_usage)
    await encoder.settled()  # what the surface keeps, handed to its store (written behind)
    await meter.durable()  # the replayed stream goes out once the hit's settlement is durable
    try:
        await resp.prepare(request)
        await resp.write(data)
        await resp.write_eof()
    except (ConnectionError, aiohttp.ClientConnectionResetError):  # the caller left; the hit is already settled
        pass
    return resp


def answer_embeddings(rt: ServingPorts, meter: Meter, entry: Entry, headers: Mapping[str, str]) -> web.Response:
    x_farebox = _settle_hit(rt, meter, entry)
    body = {**entry.body, "model": meter.tab.alias.name, "usage": {
        "prompt_tokens": entry.usage.prompt_tokens, "total_tokens": entry.usage.prompt_tokens},
        "x_farebox": x_farebox}
    return web.Response(body=orjson.dumps(body), content_type="application/json",
                        headers=_hit_headers(meter, entry, headers))
