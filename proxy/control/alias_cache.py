"""An alias's ``cache`` section: the exact cache's opt-in and the semantic cache's settings, checked.

Shape (in ``aliases[]`` and in the body of ``PUT /admin/v1/aliases/{name}``)::

    cache: {exact: true, semantic: {embeddings_alias: embed-default, threshold: "0.93", ttl_s: 86400}}

Every problem is recorded with its path (``proxy.control.problems``):
``semantic`` only on a chat alias; ``embeddings_alias`` required, and an alias
of kind embeddings (checked once every alias is read: ``check_semantic``);
``threshold`` a quoted decimal in (0, 1] with at most
``proxy.cache.similarity.PLACES`` places (default ``DEFAULT_THRESHOLD``);
``ttl_s`` a whole number of seconds >= 1.
"""

from __future__ import annotations

from collections.abc import Mapping

from proxy.cache.similarity import DEFAULT_THRESHOLD, threshold_problem
from proxy.control.problems import Problems, Reader
from proxy.snapshot import Alias, SemanticCache

DEFAULT_TTL_S = 86_400


def read_alias_cache(r: Reader, kind: str) -> tuple[bool, SemanticCache | None]:
    """(exact opt-in, semantic settings or None) of one alias entry's ``cache``."""
    cache = r.child("cache")
    exact = cache.bool("exact", False)
    semantic = None
    if cache.data.get("semantic") is not None:
        semantic = _semantic(cache.child("semantic"), kind)
    cache.skip("semantic")
    cache.reject_unknown()
    return exact, semantic


def _semantic(r: Reader, kind: str) -> SemanticCache:
    if kind != "chat":
        r.problems.add(r.path, f"only chat aliases have a semantic cache (this alias is of kind {kind})")
    name = r.str("embeddings_alias")
    r.skip("threshold")
    threshold = DEFAULT_THRESHOLD
    if r.data.get("threshold") is not None:
        value, problem = threshold_problem(r.data["threshold"])
        if problem is not None:
            r.problems.add(r.at("threshold"), problem)
        else:
            assert value is not None
            threshold = value
    ttl_s = r.int("ttl_s", DEFAULT_TTL_S, 1)
    r.reject_unknown()
    return SemanticCache(embeddings_alias=name or "?", threshold=threshold, ttl_s=ttl_s or DEFAULT_TTL_S)


def check_semantic(aliases: Mapping[str, Alias], problems: Problems) -> None:
    """Each semantic cache's ``embeddings_alias`` names an alias of kind embeddings."""
    for alias in aliases.values():
        if alias.semantic is None or alias.semantic.embeddings_alias == "?":
            continue
        name = alias.semantic.embeddings_alias
        target = aliases.get(name)
        path = f"aliases.{alias.name}.cache.semantic.embeddings_alias"
        if target is None:
            problems.add(path, f"unknown alias {name!r}")
        elif target.kind != "embeddings":
            problems.add(path, f"alias {name!r} is of kind {target.kind}, not embeddings")


def semantic_view(semantic: SemanticCache | None) -> dict[str, object] | None:
    """The semantic cache as the admin API shows it (the threshold as the decimal string it was given)."""
    if semantic is None:
        return None
    return {"embeddings_alias": semantic.embeddings_alias, "threshold": str(semantic.threshold),
            "ttl_s": semantic.ttl_s}
