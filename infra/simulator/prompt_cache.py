"""Anthropic prompt caching and extended thinking, as the simulator's Messages API does them.

Prompt caching: a ``cache_control`` breakpoint marks the end of a cacheable prefix (in Anthropic's order: tools,
then system, then messages; the last breakpoint wins). A prefix of at least ``MIN_CACHEABLE`` tokens is written
on first use (``cache_creation_input_tokens``, split by TTL in ``cache_creation``: ``ephemeral_5m_input_tokens``
or ``ephemeral_1h_input_tokens``) and read while it lives (``cache_read_input_tokens``); each read refreshes its
TTL. A shorter prefix is not cached and not an error. Entries are per account and model.

Extended thinking: a thinking block's ``signature`` is the simulator's seal of its text (``signature``); a
thinking block passed back with another signature, or altered, is refused as Anthropic refuses it.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass

MIN_CACHEABLE = 1024  # Anthropic's minimum cacheable prompt for most models
TTL_S = {"5m": 300, "1h": 3600}


def signature(thinking: str) -> str:
    """The simulator's signature of a thinking block's text (opaque to clients, as Anthropic's is)."""
    return base64.b64encode(hashlib.blake2b(b"sim-thinking:" + thinking.encode(), digest_size=48).digest()).decode()


@dataclass(frozen=True, slots=True)
class Breakpoint:
    """The cacheable prefix of one request: its text (Anthropic's order) and the TTL its breakpoint asks."""

    text: str
    tokens: int
    ttl: str  # 5m | 1h


@dataclass(frozen=True, slots=True)
class CacheUse:
    read: int = 0
    write: int = 0
    write_1h: int = 0  # of ``write``, written with the 1 h TTL


class PromptCache:
    def __init__(self) -> None:
        self.entries: dict[tuple[str, str, str], float] = {}  # (account, model, prefix digest) -> expires at

    def use(self, account: str, model: str, prefix: Breakpoint | None, now: float) -> CacheUse:
        if prefix is None or prefix.tokens < MIN_CACHEABLE:
            return CacheUse()
        key = (account, model, hashlib.sha256(prefix.text.encode()).hexdigest())
        ttl = TTL_S[prefix.ttl]
        hit = self.entries.get(key, 0.0) > now
        self.entries[key] = now + ttl
        if hit:
            return CacheUse(read=prefix.tokens)
        return CacheUse(write=prefix.tokens, write_1h=prefix.tokens if prefix.ttl == "1h" else 0)

    def clear(self) -> None:
        self.entries.clear()
