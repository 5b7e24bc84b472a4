"""Sticky splits: an alias whose traffic is divided between variants (other aliases) by weight, each caller
always on the same variant until the weights change.

An alias with a ``split`` (``proxy.snapshot.Split``) sends each request to one of its variants, chosen by a
stable hash of the split's key: ``user`` (the body's ``user`` field), ``session`` (the ``x-fb-session``
header) or ``key`` (the virtual key's id). The hash (SHA-256 of the alias name and the key's value) maps the
caller to a point in [0, total weight); the variant whose weight range holds it serves them. The same caller
lands on the same variant on every pod and every process, and moving 5 points of weight moves only the
callers whose points lie in the moved range. A request without the key's value (no ``user`` field, no session
header) falls back to the key id, so it is still sticky per key. Pure.
"""

from __future__ import annotations

import hashlib
from typing import Mapping

from proxy.snapshot import Split, Variant

SESSION_HEADER = "x-fb-session"


def split_value(split: Split, headers: Mapping[str, str], body: Mapping[str, object], key_id: str) -> str:
    """The value the caller is hashed by (falls back to the key id when the request does not carry it)."""
    if split.key == "user":
        user = body.get("user")
        if isinstance(user, str) and user:
            return "u:" + user
    elif split.key == "session":
        session = headers.get(SESSION_HEADER)
        if session:
            return "s:" + session
    return "k:" + key_id


def choose(split: Split, alias_name: str, value: str) -> Variant:
    """The variant ``value`` falls on (weights are relative; a variant of weight 0 gets no one)."""
    total = sum(v.weight for v in split.variants)
    digest = hashlib.sha256(f"{alias_name}\x00{value}".encode()).digest()
    point = int.from_bytes(digest[:8], "big") % total
    for variant in split.variants:
        if point < variant.weight:
            return variant
        point -= variant.weight
    raise AssertionError("weights cover the range")  # unreachable: point < total
