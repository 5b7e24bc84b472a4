"""Anthropic prompt caching and extended thinking, as the simulator's Messages API does them.

Prompt caching: each ``cache_control`` breakpoint marks the end of a cacheable prefix (in Anthropic's order:
tools, then system, then messages). The longest breakpoint prefix already cached is read
(``cache_read_input_tokens``; the read refreshes its TTL); the rest up to the last breakpoint is written
(``cache_creation_input_tokens``, split by the last breakpoint's TTL in ``cache_creation``:
``ephemeral_5m_input_tokens`` or ``ephemeral_1h_input_tokens``), and every breakpoint prefix is kept. So a
conversation that moves its last breakpoint forward each turn reads what the turn before wrote. A prefix
under ``MIN_CACHEABLE`` tokens is neither read nor written, and is not an error. Per account and model.

OpenAI's automatic prompt caching (``PromptCache.automatic``), for requests that name a ``prompt_cache_key``
(the simulator leaves other requests uncached, so fixed prompts keep fixed usage): the longest prefix of the
request's messages seen before under the same key, account and model is read, counted in 128-token increments
from ``MIN_CACHEABLE`` tokens up (``cached_tokens``), and every message prefix is kept ``AUTO_TTL_S``.

Extended thinking: a thinking block's ``signature`` is the simulator's seal of its text (``signature``); a
thinking block passed back with another signature, or altered, is refused as Anthropic refuses it.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass

from infra.simulator.generation import count_tokens

MIN_CACHEABLE = 1024  # Anthropic's minimum cacheable prompt for most models (OpenAI's too)
TTL_S = {"5m": 300, "1h": 3600}
AUTO_STEP = 128  # OpenAI caches prompt prefixes in increments of 128 tokens
AUTO_TTL_S = 600


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

    def use(self, account: str, model: str, prefixes: list[Breakpoint] | None, now: float) -> CacheUse:
        cacheable = sorted((p for p in prefixes or () if p.tokens >= MIN_CACHEABLE), key=lambda p: p.tokens)
        if not cacheable:
            return CacheUse()
        keys = [(account, model, hashlib.sha256(p.text.encode()).hexdigest()) for p in cacheable]
        read = max((p.tokens for p, key in zip(cacheable, keys) if self.entries.get(key, 0.0) > now), default=0)
        for p, key in zip(cacheable, keys):
            self.entries[key] = now + TTL_S[p.ttl]
        last = cacheable[-1]
        write = last.tokens - read
        return CacheUse(read=read, write=write, write_1h=write if last.ttl == "1h" else 0)

    def automatic(self, account: str, model: str, key: str | None, texts: list[str], now: float) -> int:
        """Cached prompt tokens of a request naming ``key`` (0 without one)."""
        if not key or not texts:
            return 0
        digest, tokens, read = hashlib.sha256(f"{account}\n{model}\n{key}".encode()), 0, 0
        for text in texts:
            digest.update(b"\x00" + text.encode())
            tokens += count_tokens(text)
            entry = (account, model, "auto:" + digest.hexdigest())
            if self.entries.get(entry, 0.0) > now:
                read = tokens
            self.entries[entry] = now + AUTO_TTL_S
        return read // AUTO_STEP * AUTO_STEP if read >= MIN_CACHEABLE else 0

    def clear(self) -> None:
        self.entries.clear()
