"""Alias -> ordered candidate deployments: filter what cannot serve, then order.

Filtering explains itself: when nothing is left, the error names why
(a parameter no deployment supports, the data class, the context window).
Ordering is a weighted shuffle (Efraimidis–Spirakis): the first candidate is
drawn by weight, the rest follow as failover order.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterable

from proxy.control.snapshot import Alias, Deployment, Snapshot
from proxy.errors import InvalidRequest, PermissionDenied, UnsupportedParameter


@dataclass(frozen=True, slots=True)
class Needs:
    """What a request requires of a deployment, with the parameter that asked."""

    capabilities: tuple[tuple[str, str], ...]  # (capability, param)
    data_class: str
    min_context: int


def chat_needs(body: dict, data_class: str, min_context: int) -> Needs:
    caps: list[tuple[str, str]] = []
    if body.get("tools"):
        caps.append(("tools", "tools"))
    rf = body.get("response_format")
    if isinstance(rf, dict) and rf.get("type") in ("json_schema", "json_object"):
        caps.append(("json_schema" if rf["type"] == "json_schema" else "json_object", "response_format"))
    if _has_images(body.get("messages") or ()):
        caps.append(("vision", "messages"))
    return Needs(tuple(caps), data_class, min_context)


def _has_images(messages: Iterable[dict]) -> bool:
    for msg in messages:
        content = msg.get("content")
        if isinstance(content, list) and any(p.get("type") == "image_url" for p in content):
            return True
    return False


def _capable(dep: Deployment, cap: str) -> bool:
    # json_object is implied by json_schema support.
    return cap in dep.capabilities or (cap == "json_object" and "json_schema" in dep.capabilities)


def candidates(snapshot: Snapshot, alias: Alias, needs: Needs, rng: random.Random) -> list[Deployment]:
    deps = [snapshot.deployments[d] for d in alias.deployments]
    for cap, param in needs.capabilities:
        deps = [d for d in deps if _capable(d, cap)]
        if not deps:
            raise UnsupportedParameter(param, f"any deployment of alias {alias.name}", f"needs capability '{cap}'")
    kept = [d for d in deps if needs.data_class in d.data_classes]
    if not kept:
        raise PermissionDenied(
            f"No deployment of alias '{alias.name}' may receive data of class '{needs.data_class}'; the request was not sent.",
            code="data_class_not_routable",
        )
    fits = [d for d in kept if d.context_window >= needs.min_context]
    if not fits:
        largest = max(d.context_window for d in kept)
        raise InvalidRequest(
            f"This request needs about {needs.min_context} tokens (input estimate + output cap); "
            f"the largest context window of alias '{alias.name}' is {largest} tokens.",
            param="messages",
            code="context_length_exceeded",
        )
    return weighted_order(fits, rng)


def weighted_order(deps: list[Deployment], rng: random.Random) -> list[Deployment]:
    if len(deps) == 1:
        return deps
    keyed = [(rng.random() ** (1.0 / d.weight), d) for d in deps]
    keyed.sort(key=lambda kd: kd[0], reverse=True)
    return [d for _, d in keyed]
