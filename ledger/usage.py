"""Token usage by priced type.

The categories are disjoint so each can be priced on its own:
``input`` is uncached input only, ``cached_input`` is input read from a
provider prompt cache, ``cache_write`` is input written to one, ``output`` is
visible output and ``reasoning`` is hidden reasoning output.

``cache_write_1h`` is a detail of ``cache_write``, not a sixth type: of the cache-write tokens, those written
with a one-hour lifetime (Anthropic's ``ephemeral_1h_input_tokens``), priced at the deployment's
``cache_write_1h`` price instead of its ``cache_write`` price (``pricing.rating``). Every count by type keeps
``cache_write`` as all writes. ``to_dict`` carries it only when it is not 0 (a usage without one-hour writes
has the same wire form with or without the field), and a usage read without it has 0.

``service_tier`` is the tier the provider says it served the request at, when it is not its standard one
(OpenAI's ``flex``, ``priority`` or ``scale``; Anthropic's ``priority``; ``batch``): the attempt is priced at the
deployment's prices for that tier (``pricing.rating``). Like ``cache_write_1h`` it is in ``to_dict`` only when
set, so a standard-tier usage has the same wire form as before tiers existed.

``source`` says where the counts come from: ``provider`` (what the provider
reported, checked), ``estimated`` (the provider reported nothing; farebox's
estimate) or ``provider_invalid`` (the provider reported something that failed
the usage boundary, ``proxy.upstream.usage_check``: the counts are farebox's
estimate and ``received`` keeps a short text of what was sent, for the
attempt event and reconciliation). ``received`` is never part of ``to_dict``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

UsageSource = Literal["provider", "estimated", "provider_invalid"]

USAGE_SOURCES = ("provider", "estimated", "provider_invalid")

TOKEN_TYPES = ("input", "cached_input", "cache_write", "output", "reasoning")
# A served tier's name: a short lower-case identifier (``flex``, ``priority``, ``scale``, ``batch``).
SERVICE_TIER = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
# What providers call their standard tier (and the request-side "auto"): priced at the deployment's own prices.
STANDARD_TIERS = frozenset({"default", "standard", "auto", "on_demand", "standard_only"})


@dataclass(frozen=True, slots=True)
class TokenUsage:
    input: int = 0
    cached_input: int = 0
    cache_write: int = 0
    output: int = 0
    reasoning: int = 0
    source: UsageSource = "provider"
    received: str | None = None  # with provider_invalid: what the provider sent (short, for the event)
    cache_write_1h: int = 0  # of cache_write, the tokens written with a one-hour lifetime (priced on their own)
    service_tier: str | None = None  # the non-standard tier served (``SERVICE_TIER``); None: the standard one

    @property
    def prompt_tokens(self) -> int:
        """All input tokens, as OpenAI's ``prompt_tokens`` counts them."""
        return self.input + self.cached_input + self.cache_write

    @property
    def completion_tokens(self) -> int:
        """All output tokens, as OpenAI's ``completion_tokens`` counts them."""
        return self.output + self.reasoning

    def to_dict(self) -> dict[str, int | str]:
        # Explicit rather than dataclasses.asdict, which deep-copies: this runs three times per request.
        out: dict[str, int | str] = {
            "input": self.input,
            "cached_input": self.cached_input,
            "cache_write": self.cache_write,
            "output": self.output,
            "reasoning": self.reasoning,
            "source": self.source,
        }
        if self.cache_write_1h:
            out["cache_write_1h"] = self.cache_write_1h
        if self.service_tier:
            out["service_tier"] = self.service_tier
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "TokenUsage":
        return cls(**{k: data[k] for k in (*TOKEN_TYPES, "source", "cache_write_1h", "service_tier") if k in data})

    def to_openai(self) -> dict:
        """The OpenAI ``usage`` object for these counts."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_input},
            "completion_tokens_details": {"reasoning_tokens": self.reasoning},
        }

    @classmethod
    def from_openai(cls, usage: dict, source: UsageSource = "provider") -> "TokenUsage":
        """Split an OpenAI ``usage`` object into disjoint priced types."""
        prompt = int(usage.get("prompt_tokens") or 0)
        completion = int(usage.get("completion_tokens") or 0)
        pdet = usage.get("prompt_tokens_details") or {}
        cdet = usage.get("completion_tokens_details") or {}
        cached = int(pdet.get("cached_tokens") or 0)
        reasoning = int(cdet.get("reasoning_tokens") or 0)
        return cls(
            input=max(prompt - cached, 0),
            cached_input=cached,
            output=max(completion - reasoning, 0),
            reasoning=reasoning,
            source=source,
        )
