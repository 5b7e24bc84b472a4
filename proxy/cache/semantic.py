"""The semantic cache's hook into the request path: embed the last user turn, search, store.

``proxy.cache.serving`` calls it for a chat request whose alias has a
``cache.semantic`` and that the exact cache's policy lets use a cache
(``for_step``), in this order:

1. after the exact lookup missed, ``lookup`` embeds the last user turn
   (``proxy.cache.policy.last_user_text``) through the alias's embeddings
   alias: a request of its own (id ``{request_id}.semantic``), routed,
   admitted, metered and settled like any embeddings request under the
   caller's key, so its cost lands on the caller's key, team and business
   unit, tagged ``fb.cache=semantic`` and ``fb.cache_for={request_id}`` for
   showback (no agent run: it is not one of the run's calls). Then it searches
   each candidate model's namespace (``semantic_namespace``) in routing
   order; the first hit (similarity >= the alias's threshold,
   ``proxy.cache.similarity.is_hit``) is the answer, recorded on the tab as
   ``cache_kind = "semantic"`` with its similarity;
2. a miss goes upstream as usual, and ``store`` keeps the fetched answer
   with its vector in the namespace of the model that answered, for the
   alias's ``ttl_s``.

Whatever fails here (no route, a refusal, the embeddings deployment down, a
vector that does not read, the store unreachable) is a miss, never an error
for the caller; only the caller leaving ends the request. A semantic hit is
not written back to the exact cache: the next verbatim repeat pays for its
embedding again and is recorded as a semantic hit, as it is one.
"""

from __future__ import annotations

import logging
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from proxy.admission.admit import AdmitPorts, admit, tries
from proxy.admission.plan import embeddings_input_estimate
from proxy.cache.entry import Entry
from proxy.cache.policy import CacheUse, last_user_text, semantic_namespace
from proxy.cache.port import VectorStore
from proxy.cache.similarity import normalised, similarity_text
from proxy.errors import GatewayError
from proxy.metering.meter import Meter, MeterPorts
from proxy.metering.settlement import Tab, scopes_of
from proxy.routing.answer import settled_answer
from proxy.routing.chain import chain_for, key_deployments, key_regions
from proxy.routing.router import Needs
from proxy.snapshot import Alias, Deployment, SemanticCache, Snapshot
from proxy.snapshot.privacy import PrivacyPolicy
from proxy.upstream.dialects import get_dialect
from proxy.upstream.relay import Timeouts, UpstreamClient, parsed
from proxy.upstream.usage_check import estimated_as, needs_estimate, within

log = logging.getLogger("farebox.proxy")

TAG, TAG_FOR = "fb.cache", "fb.cache_for"  # the embedding request's tags: what it is, and for which request


class Classification(Protocol):
    """The request's privacy decision (``proxy.privacy.classify.Classified``), as the caches read it."""

    redaction: Any  # not None: some deployment gets a redacted body (such requests are never cached)

    @property
    def data_class(self) -> str: ...
    @property
    def outside_class(self) -> str | None: ...

    def audit(self, policy: PrivacyPolicy, first: Deployment, messages: Any) -> Any: ...


class SemanticPorts(AdmitPorts, MeterPorts, Protocol):
    """What the semantic cache reads and calls through: its vectors, and the embedding request's path."""

    @property
    def vectors(self) -> VectorStore: ...
    @property
    def upstream(self) -> UpstreamClient: ...
    @property
    def snapshot(self) -> Snapshot: ...


@dataclass(slots=True)
class SemanticStep:
    """One chat request's use of the semantic cache: what to embed, where to search, the vector it got."""

    config: SemanticCache
    text: str
    read: bool  # look up (Cache-Control: no-cache stores without reading)
    models: tuple[str, ...]  # the candidates' models, in routing order
    privacy: Classification  # the chat request's classification: the embedding goes where the prompt may go
    vector: array | None = None  # the last user turn's unit vector, once embedded
    embedding_model: str = ""  # the model that embedded it (part of the namespace)

    def namespace(self, team: str, model: str, body: Mapping[str, Any], max_output_tokens: int) -> str:
        return semantic_namespace(team, model, self.embedding_model, body, max_output_tokens)


def for_step(alias: Alias, use: CacheUse, body: Mapping[str, Any], cands: Sequence[Deployment],
             privacy: Classification) -> SemanticStep | None:
    """The request's semantic step, or None: no semantic cache here, no cache use, or no user text to embed."""
    if alias.semantic is None or not (use.read or use.write):
        return None
    text = last_user_text(body)
    if text is None:
        return None
    return SemanticStep(alias.semantic, text, use.read, tuple(dict.fromkeys(d.model for d in cands)), privacy)


async def lookup(rt: SemanticPorts, step: SemanticStep, meter: Meter, body: Mapping[str, Any],
                 max_output_tokens: int) -> Entry | None:
    """Embed the request's last user turn (kept on ``step`` for ``store``), then the first hit, if reading."""
    tab = meter.tab
    embedded = await embed(rt, tab, step.privacy, step.config.embeddings_alias, step.text)
    if embedded is None:
        return None
    step.vector, step.embedding_model = embedded
    if not step.read:
        return None
    for model in step.models:
        match = await rt.vectors.nearest(step.namespace(tab.key.team, model, body, max_output_tokens), step.vector,
                                         step.config.threshold)
        if match is None or match.value is None:
            continue
        try:
            entry = Entry.loads(match.value)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("unreadable semantic cache entry skipped: %s", type(exc).__name__)
            continue
        tab.cache_kind, tab.cache_similarity = "semantic", similarity_text(match.similarity)
        return entry
    return None


async def store(rt: SemanticPorts, step: SemanticStep, team: str, model: str, body: Mapping[str, Any],
                max_output_tokens: int, value: bytes) -> None:
    """Keep a fetched answer with the request's vector, under the namespace of the model that answered."""
    if step.vector is None:
        return
    await rt.vectors.add(step.namespace(team, model, body, max_output_tokens), step.vector, value,
                         step.config.ttl_s)


async def embed(rt: SemanticPorts, caller: Tab, privacy: Classification, alias_name: str,
                text: str) -> tuple[array, str] | None:
    """``text``'s unit vector and the model that made it, by an embeddings request of the caller's key; None
    when it could not be had (a refusal, no route, an upstream failure, a vector that does not read)."""
    snap, key = caller.snapshot, caller.key
    alias = snap.aliases.get(alias_name)
    if alias is None or alias.kind != "embeddings":
        return None
    est_in = embeddings_input_estimate([text])
    needs = Needs((("embeddings", "model"),), privacy.data_class, est_in, key_regions(key), key_deployments(key),
                  outside_class=privacy.outside_class, outside_refused=privacy.outside_class is None, team=key.team)
    tab = Tab(snap, f"{caller.request_id}.semantic", key, alias, None, privacy.data_class, False,
              scopes_of(key, None), cost_centre=caller.cost_centre,
              tags={**caller.tags, TAG: "semantic", TAG_FOR: caller.request_id}, api="embeddings")
    meter = Meter(rt, tab, max_wait_s=0.0)  # never queue behind in-flight holds: a short budget is a miss
    upstream, timeouts = rt.upstream, Timeouts.of(alias)

    async def attempt(dep: Deployment):  # type: ignore[no-untyped-def]
        dialect = get_dialect(dep.dialect)
        req = dialect.embeddings_request({"input": [text]}, dep, await upstream.credential(dep))
        result = parsed(dialect.parse_embeddings, await upstream.complete(dialect, req, timeouts, dep))
        result.usage = within(result.usage, dep.context_window)
        if needs_estimate(result.usage):
            result.usage = estimated_as(result.usage, input_tokens=est_in, output_tokens=0)
        return result

    try:
        chain = await chain_for(rt.limits, rt.routing, rt.rng, rt.now_us(), snap, alias, needs, None, False)
        tab.privacy = privacy.audit(snap.privacy, chain.deployments[0], [text])
        await admit(rt, meter, chain.deployments, est_in, 0)
        dep, result = await settled_answer(meter, chain.deployments, chain, tries(rt, meter), attempt)
    except GatewayError as exc:
        log.info("semantic cache lookup skipped: the embedding failed (%s)", exc.code or type(exc).__name__)
        return None
    vector = _first_vector(result.body)
    if vector is None:
        log.warning("semantic cache lookup skipped: %s sent no usable embedding", dep.id)
        return None
    return vector, dep.model


def _first_vector(body: Mapping[str, Any]) -> array | None:
    data = body.get("data")
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        return None
    values = data[0].get("embedding")
    if not isinstance(values, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                               for v in values):
        return None
    return normalised(values)
